// The C API of libomni-hal (hal/hal.h): a thin layer over the C++ node model that
// keeps every exception and C++ type on this side of the boundary.
#include "hal/hal.h"

#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "common/c_status.h"
#include "hal/model.h"

struct omni_hal_node {
    omni::hal::Node node;
    /* Per kind: the node's domain ids that hold GPUs, in order. The C API numbers only
     * those, so that a NUMA node without GPUs never shows up as an empty domain. */
    std::vector<unsigned> used[omni::hal::kDomainKinds];
    std::vector<int> compact[omni::hal::kDomainKinds];  // node domain id -> C domain number
};

namespace {

thread_local std::string g_err;

// Every failure goes through here: the status code and this thread's message.
int fail(omni_status code, std::string msg) { return omni::capi::record(g_err, code, std::move(msg)); }

int put(const char *fn, char *buf, std::size_t len, const std::string &s) {
    if (!buf || len == 0) return fail(OMNI_EINVAL, std::string(fn) + ": the buffer is NULL or empty");
    const std::size_t n = std::min(len - 1, s.size());
    std::memcpy(buf, s.data(), n);
    buf[n] = '\0';
    if (n == s.size()) return OMNI_OK;
    return fail(OMNI_ERANGE, std::string(fn) + ": the buffer holds " + std::to_string(len) +
                                 " bytes, " + std::to_string(s.size() + 1) + " are needed");
}

// OMNI_OK for a handle and a GPU index it has, else OMNI_EINVAL with a message naming them.
int check_gpu(const char *fn, const omni_hal_node *h, int gpu) {
    if (!h) return fail(OMNI_EINVAL, std::string(fn) + ": the node handle is NULL");
    if (gpu < 0 || static_cast<std::size_t>(gpu) >= h->node.gpus.size())
        return fail(OMNI_EINVAL, std::string(fn) + ": GPU " + std::to_string(gpu) +
                                     ": expected an index in 0.." +
                                     std::to_string(static_cast<long>(h->node.gpus.size()) - 1));
    return OMNI_OK;
}

int check_kind(const char *fn, int kind) {
    if (kind >= 0 && kind < static_cast<int>(omni::hal::kDomainKinds)) return OMNI_OK;
    return fail(OMNI_EINVAL, std::string(fn) + ": domain kind " + std::to_string(kind) +
                                 " is not an omni_hal_domain_kind");
}

std::string join_names(const std::vector<std::size_t> &idx, const std::vector<std::string> &names) {
    std::string out;
    for (auto i : idx) out += (out.empty() ? "" : ",") + names[i];
    return out;
}

// Every entry point's body runs here: no exception may unwind into C code.
template <typename F>
int guard(const char *fn, F &&f) noexcept {
    return omni::capi::guard(g_err, fn, std::forward<F>(f));
}

}  // namespace

extern "C" {

const char *omni_hal_last_error(void) { return g_err.c_str(); }

int omni_hal_load(const char *xml_path, omni_hal_node **out) {
    if (!out) return fail(OMNI_EINVAL, "omni_hal_load: out is NULL");
    *out = nullptr;
    return guard("omni_hal_load", [&] {
        omni::hal::LoadOptions opts;
        if (xml_path) opts.topology_file = xml_path;
        auto r = omni::hal::load_node(opts);
        if (!r) return fail(OMNI_EIO, r.error());
        auto h = std::make_unique<omni_hal_node>(omni_hal_node{std::move(r).value(), {}, {}});
        for (std::size_t k = 0; k < omni::hal::kDomainKinds; ++k) {
            h->compact[k].assign(h->node.domains[k].size(), -1);
            for (const auto &d : h->node.domains[k])
                if (!d.gpus.empty()) {
                    h->compact[k][d.id] = static_cast<int>(h->used[k].size());
                    h->used[k].push_back(d.id);
                }
        }
        *out = h.release();
        return static_cast<int>(OMNI_OK);
    });
}

void omni_hal_free(omni_hal_node *node) { delete node; }

int omni_hal_gpu_count(const omni_hal_node *node) {
    if (!node) return fail(OMNI_EINVAL, "omni_hal_gpu_count: the node handle is NULL");
    return static_cast<int>(node->node.gpus.size());
}

int omni_hal_gpu_bdf(const omni_hal_node *node, int gpu, char *buf, size_t len) {
    if (int rc = check_gpu("omni_hal_gpu_bdf", node, gpu)) return rc;
    return guard("omni_hal_gpu_bdf", [&] {
        const auto &b = node->node.gpus[gpu].pci.bdf;
        if (!b) return fail(OMNI_ENOENT, "omni_hal_gpu_bdf: GPU " + std::to_string(gpu) + " has no PCI address");
        return put("omni_hal_gpu_bdf", buf, len, b->format());
    });
}

int omni_hal_gpu_cpus(const omni_hal_node *node, int gpu, char *buf, size_t len) {
    if (int rc = check_gpu("omni_hal_gpu_cpus", node, gpu)) return rc;
    return guard("omni_hal_gpu_cpus", [&] {
        return put("omni_hal_gpu_cpus", buf, len, omni::hal::format_cpulist(node->node.gpus[gpu].loc.cpus));
    });
}

int omni_hal_gpu_numa(const omni_hal_node *node, int gpu) {
    if (int rc = check_gpu("omni_hal_gpu_numa", node, gpu)) return rc;
    const int n = node->node.gpus[gpu].loc.numa;
    if (n >= 0) return n;
    return fail(OMNI_ENOENT, "omni_hal_gpu_numa: the NUMA node of GPU " + std::to_string(gpu) + " is unknown");
}

int omni_hal_gpu_nics(const omni_hal_node *node, int gpu, char *buf, size_t len) {
    if (int rc = check_gpu("omni_hal_gpu_nics", node, gpu)) return rc;
    return guard("omni_hal_gpu_nics", [&] {
        std::vector<std::string> names;
        for (const auto &n : node->node.nics) names.push_back(n.name);
        const auto &idx = node->node.closest_nics[gpu];
        if (idx.empty()) return fail(OMNI_ENOENT, "omni_hal_gpu_nics: the node has no NIC");
        return put("omni_hal_gpu_nics", buf, len, join_names(idx, names));
    });
}

int omni_hal_gpu_nvme(const omni_hal_node *node, int gpu, char *buf, size_t len) {
    if (int rc = check_gpu("omni_hal_gpu_nvme", node, gpu)) return rc;
    return guard("omni_hal_gpu_nvme", [&] {
        std::vector<std::string> names;
        for (const auto &d : node->node.nvmes) names.push_back(d.name);
        const auto &idx = node->node.closest_nvmes[gpu];
        if (idx.empty()) return fail(OMNI_ENOENT, "omni_hal_gpu_nvme: the node has no NVMe drive");
        return put("omni_hal_gpu_nvme", buf, len, join_names(idx, names));
    });
}

int omni_hal_gpu_path(const omni_hal_node *node, int a, int b, char *buf, size_t len) {
    if (int rc = check_gpu("omni_hal_gpu_path", node, a)) return rc;
    if (int rc = check_gpu("omni_hal_gpu_path", node, b)) return rc;
    return guard("omni_hal_gpu_path", [&] {
        return put("omni_hal_gpu_path", buf, len, omni::hal::path_name(node->node.gpu_paths[a][b]));
    });
}

int omni_hal_domain_kind_parse(const char *text, enum omni_hal_domain_kind *kind) {
    if (!text || !kind) return fail(OMNI_EINVAL, "omni_hal_domain_kind_parse: NULL argument");
    return guard("omni_hal_domain_kind_parse", [&] {
        auto r = omni::hal::parse_domain_kind(text, "domain kind");
        if (!r) return fail(OMNI_EINVAL, r.error());
        *kind = static_cast<omni_hal_domain_kind>(r.value());
        return static_cast<int>(OMNI_OK);
    });
}

int omni_hal_domain_count(const omni_hal_node *node, enum omni_hal_domain_kind kind) {
    if (!node) return fail(OMNI_EINVAL, "omni_hal_domain_count: the node handle is NULL");
    if (int rc = check_kind("omni_hal_domain_count", kind)) return rc;
    return static_cast<int>(node->used[kind].size());
}

int omni_hal_gpu_domain(const omni_hal_node *node, int gpu, enum omni_hal_domain_kind kind) {
    if (int rc = check_gpu("omni_hal_gpu_domain", node, gpu)) return rc;
    if (int rc = check_kind("omni_hal_gpu_domain", kind)) return rc;
    return node->compact[kind][node->node.gpu_domain[kind][gpu]];
}

int omni_hal_domain_gpus(const omni_hal_node *node, enum omni_hal_domain_kind kind, int domain,
                         int *gpus, size_t cap) {
    if (!node) return fail(OMNI_EINVAL, "omni_hal_domain_gpus: the node handle is NULL");
    if (int rc = check_kind("omni_hal_domain_gpus", kind)) return rc;
    if (domain < 0 || static_cast<std::size_t>(domain) >= node->used[kind].size())
        return fail(OMNI_EINVAL, "omni_hal_domain_gpus: domain " + std::to_string(domain) +
                                     ": expected an index in 0.." +
                                     std::to_string(static_cast<long>(node->used[kind].size()) - 1));
    if (cap && !gpus) return fail(OMNI_EINVAL, "omni_hal_domain_gpus: gpus is NULL with a capacity");
    const auto &d = node->node.domains[kind][node->used[kind][domain]];
    for (std::size_t i = 0; i < d.gpus.size() && i < cap; ++i) gpus[i] = static_cast<int>(d.gpus[i]);
    return static_cast<int>(d.gpus.size());
}

}  // extern "C"
