// The C API of libomni-hal (include/omni/hal.h): a thin layer over the C++ node model that
// keeps every exception and C++ type on this side of the boundary.
#include "omni/hal.h"

#include <cstring>
#include <new>
#include <string>

#include "omni/hal_model.h"

struct omni_hal_node {
    omni::hal::Node node;
    /* Per kind: the node's domain ids that hold GPUs, in order. The C API numbers only
     * those, so that a NUMA node without GPUs never shows up as an empty domain. */
    std::vector<unsigned> used[omni::hal::kDomainKinds];
    std::vector<int> compact[omni::hal::kDomainKinds];  // node domain id -> C domain number
};

namespace {

void set_err(char *err, std::size_t errlen, const std::string &msg) {
    if (!err || errlen == 0) return;
    const std::size_t n = std::min(errlen - 1, msg.size());
    std::memcpy(err, msg.data(), n);
    err[n] = '\0';
}

int put(char *buf, std::size_t len, const std::string &s) {
    if (!buf || len == 0) return OMNI_HAL_EINVAL;
    const std::size_t n = std::min(len - 1, s.size());
    std::memcpy(buf, s.data(), n);
    buf[n] = '\0';
    return n == s.size() ? OMNI_HAL_OK : OMNI_HAL_ERANGE;
}

bool valid_gpu(const omni_hal_node *h, int gpu) {
    return h && gpu >= 0 && static_cast<std::size_t>(gpu) < h->node.gpus.size();
}

bool valid_kind(int kind) { return kind >= 0 && kind < static_cast<int>(omni::hal::kDomainKinds); }

std::string join_names(const std::vector<std::size_t> &idx, const std::vector<std::string> &names) {
    std::string out;
    for (auto i : idx) out += (out.empty() ? "" : ",") + names[i];
    return out;
}

}  // namespace

extern "C" {

int omni_hal_load(const char *xml_path, omni_hal_node **out, char *err, size_t errlen) {
    if (!out) {
        set_err(err, errlen, "omni_hal_load: out is NULL");
        return OMNI_HAL_EINVAL;
    }
    *out = nullptr;
    try {
        omni::hal::LoadOptions opts;
        if (xml_path) opts.topology_file = xml_path;
        auto r = omni::hal::load_node(opts);
        if (!r) {
            set_err(err, errlen, r.error());
            return OMNI_HAL_ELOAD;
        }
        auto *h = new omni_hal_node{std::move(r).value(), {}, {}};
        for (std::size_t k = 0; k < omni::hal::kDomainKinds; ++k) {
            h->compact[k].assign(h->node.domains[k].size(), -1);
            for (const auto &d : h->node.domains[k])
                if (!d.gpus.empty()) {
                    h->compact[k][d.id] = static_cast<int>(h->used[k].size());
                    h->used[k].push_back(d.id);
                }
        }
        *out = h;
        return OMNI_HAL_OK;
    } catch (const std::bad_alloc &) {
        set_err(err, errlen, "omni_hal_load: out of memory");
        return OMNI_HAL_ENOMEM;
    } catch (const std::exception &e) {
        set_err(err, errlen, std::string("omni_hal_load: ") + e.what());
        return OMNI_HAL_ELOAD;
    }
}

void omni_hal_free(omni_hal_node *node) { delete node; }

int omni_hal_gpu_count(const omni_hal_node *node) {
    return node ? static_cast<int>(node->node.gpus.size()) : OMNI_HAL_EINVAL;
}

int omni_hal_gpu_bdf(const omni_hal_node *node, int gpu, char *buf, size_t len) {
    if (!valid_gpu(node, gpu)) return OMNI_HAL_EINVAL;
    const auto &b = node->node.gpus[gpu].pci.bdf;
    if (!b) return OMNI_HAL_ENOENT;
    return put(buf, len, b->format());
}

int omni_hal_gpu_cpus(const omni_hal_node *node, int gpu, char *buf, size_t len) {
    if (!valid_gpu(node, gpu)) return OMNI_HAL_EINVAL;
    try {
        return put(buf, len, omni::hal::format_cpulist(node->node.gpus[gpu].loc.cpus));
    } catch (...) {
        return OMNI_HAL_ENOMEM;
    }
}

int omni_hal_gpu_numa(const omni_hal_node *node, int gpu) {
    if (!valid_gpu(node, gpu)) return OMNI_HAL_EINVAL;
    const int n = node->node.gpus[gpu].loc.numa;
    return n >= 0 ? n : OMNI_HAL_ENOENT;
}

int omni_hal_gpu_nics(const omni_hal_node *node, int gpu, char *buf, size_t len) {
    if (!valid_gpu(node, gpu)) return OMNI_HAL_EINVAL;
    try {
        std::vector<std::string> names;
        for (const auto &n : node->node.nics) names.push_back(n.name);
        const auto &idx = node->node.closest_nics[gpu];
        if (idx.empty()) return OMNI_HAL_ENOENT;
        return put(buf, len, join_names(idx, names));
    } catch (...) {
        return OMNI_HAL_ENOMEM;
    }
}

int omni_hal_gpu_nvme(const omni_hal_node *node, int gpu, char *buf, size_t len) {
    if (!valid_gpu(node, gpu)) return OMNI_HAL_EINVAL;
    try {
        std::vector<std::string> names;
        for (const auto &d : node->node.nvmes) names.push_back(d.name);
        const auto &idx = node->node.closest_nvmes[gpu];
        if (idx.empty()) return OMNI_HAL_ENOENT;
        return put(buf, len, join_names(idx, names));
    } catch (...) {
        return OMNI_HAL_ENOMEM;
    }
}

int omni_hal_gpu_path(const omni_hal_node *node, int a, int b, char *buf, size_t len) {
    if (!valid_gpu(node, a) || !valid_gpu(node, b)) return OMNI_HAL_EINVAL;
    try {
        return put(buf, len, omni::hal::path_name(node->node.gpu_paths[a][b]));
    } catch (...) {
        return OMNI_HAL_ENOMEM;
    }
}

int omni_hal_domain_kind_parse(const char *text, enum omni_hal_domain_kind *kind, char *err,
                               size_t errlen) {
    if (!text || !kind) {
        set_err(err, errlen, "omni_hal_domain_kind_parse: NULL argument");
        return OMNI_HAL_EINVAL;
    }
    try {
        auto r = omni::hal::parse_domain_kind(text, "domain kind");
        if (!r) {
            set_err(err, errlen, r.error());
            return OMNI_HAL_EINVAL;
        }
        *kind = static_cast<omni_hal_domain_kind>(r.value());
        return OMNI_HAL_OK;
    } catch (...) {
        return OMNI_HAL_ENOMEM;
    }
}

int omni_hal_domain_count(const omni_hal_node *node, enum omni_hal_domain_kind kind) {
    if (!node || !valid_kind(kind)) return OMNI_HAL_EINVAL;
    return static_cast<int>(node->used[kind].size());
}

int omni_hal_gpu_domain(const omni_hal_node *node, int gpu, enum omni_hal_domain_kind kind) {
    if (!valid_gpu(node, gpu) || !valid_kind(kind)) return OMNI_HAL_EINVAL;
    return node->compact[kind][node->node.gpu_domain[kind][gpu]];
}

int omni_hal_domain_gpus(const omni_hal_node *node, enum omni_hal_domain_kind kind, int domain,
                         int *gpus, size_t cap) {
    if (!node || !valid_kind(kind) || domain < 0 ||
        static_cast<std::size_t>(domain) >= node->used[kind].size() || (cap && !gpus))
        return OMNI_HAL_EINVAL;
    const auto &d = node->node.domains[kind][node->used[kind][domain]];
    for (std::size_t i = 0; i < d.gpus.size() && i < cap; ++i) gpus[i] = static_cast<int>(d.gpus[i]);
    return static_cast<int>(d.gpus.size());
}

}  // extern "C"
