// The C face of select/omni's C++ parts; see select_core.h.
#include "select_core.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/c_status.h"
#include "common/job_options.h"
#include "placement/placement.h"
#include "site_layout.h"

struct omni_select_site {
    omni::select::SiteLayouts layouts;
    std::unordered_map<std::string, std::size_t> index;  // the map of layouts, hashed: looked up per node per job
};

namespace {

thread_local std::string g_err;

int fail(omni_status code, std::string msg) { return omni::capi::record(g_err, code, std::move(msg)); }

template <typename F>
int guarded(const char *fn, F &&f) {
    return omni::capi::guard(g_err, fn, std::forward<F>(f));
}

}  // namespace

extern "C" {

const char *omni_select_last_error(void) { return g_err.c_str(); }

int omni_select_site_load(const char *path, omni_select_site_t **out) {
    return guarded("omni_select_site_load", [&]() -> int {
        if (!path || !out) return fail(OMNI_EINVAL, "omni_select_site_load: NULL argument");
        *out = nullptr;
        struct stat st;
        if (::stat(path, &st) != 0 && errno == ENOENT)
            return fail(OMNI_ENOENT, std::string(path) + ": no such file");
        auto layouts = omni::select::read_site_layouts(path);
        if (!layouts) return fail(OMNI_EIO, layouts.error());
        auto site = std::make_unique<omni_select_site>();
        site->layouts = std::move(layouts.value());
        for (const auto &[host, i] : site->layouts.index) site->index.emplace(host, i);
        *out = site.release();
        return OMNI_OK;
    });
}

void omni_select_site_free(omni_select_site_t *site) { delete site; }

size_t omni_select_site_nodes(const omni_select_site_t *site) { return site ? site->layouts.layouts.size() : 0; }

long omni_select_site_find(const omni_select_site_t *site, const char *hostname, unsigned *gpus) {
    long at = -1;
    guarded(nullptr, [&]() -> int {
        if (!site || !hostname) return OMNI_EINVAL;
        auto it = site->index.find(hostname);
        if (it == site->index.end()) return OMNI_ENOENT;
        at = static_cast<long>(it->second);
        if (gpus) *gpus = site->layouts.layouts[it->second].gpus;
        return OMNI_OK;
    });
    return at;
}

int omni_select_job_read(char *const *env, unsigned envc, omni_select_job_t *out) {
    return guarded("omni_select_job_read", [&]() -> int {
        if (!out || (envc && !env)) return fail(OMNI_EINVAL, "omni_select_job_read: NULL argument");
        auto get = [&](const char *name) -> const char * {
            const std::size_t len = std::strlen(name);
            for (unsigned i = 0; i < envc; ++i)
                if (env[i] && std::strncmp(env[i], name, len) == 0 && env[i][len] == '=') return env[i] + len + 1;
            return nullptr;
        };
        if (!get("OMNI_UNIT_SIZE")) return OMNI_ENOENT;
        auto opts = omni::job_options_from_job_env(get);
        if (!opts) return fail(OMNI_EINVAL, opts.error());
        const omni::JobOptions &o = opts.value();
        auto kind = omni::placement::parse_kind(o.unit_domain.value_or("node"));
        if (!kind) return fail(OMNI_EINVAL, kind.error());
        const auto k = kind.value();
        if (k == omni::placement::Kind::Node || k == omni::placement::Kind::Any) return OMNI_ENOENT;
        out->ranks_per_unit = static_cast<unsigned>(o.unit_size);
        out->kind = static_cast<int>(k);
        out->kind_name = omni::placement::kind_name(k);
        out->min_units = o.elastic ? static_cast<unsigned>(o.elastic->first) : 1;
        out->max_units = o.elastic ? static_cast<unsigned>(o.elastic->second) : UINT32_MAX;
        return OMNI_OK;
    });
}

int omni_select_place(const omni_select_site_t *site, const omni_select_job_t *job, unsigned units_per_node,
                      unsigned min_nodes, unsigned max_nodes, omni_select_node_t *nodes, size_t n) {
    return guarded("omni_select_place", [&]() -> int {
        if (!site || !job || (n && !nodes)) return fail(OMNI_EINVAL, "omni_select_place: NULL argument");
        if (job->kind < 0 || job->kind > static_cast<int>(omni::placement::Kind::Numa))
            return fail(OMNI_EINVAL, "omni_select_place: domain kind " + std::to_string(job->kind));
        namespace pl = omni::placement;
        const auto &layouts = site->layouts.layouts;
        std::vector<pl::NodeCandidate> cands(n);
        for (std::size_t i = 0; i < n; ++i) {
            nodes[i].gpus = 0;
            if (nodes[i].site_node < 0 || static_cast<std::size_t>(nodes[i].site_node) >= layouts.size())
                return fail(OMNI_EINVAL, "omni_select_place: node " + std::to_string(i) + ": site node " +
                                             std::to_string(nodes[i].site_node) + " of " + std::to_string(layouts.size()));
            const pl::NodeLayout &l = layouts[static_cast<std::size_t>(nodes[i].site_node)];
            cands[i].layout = static_cast<std::uint32_t>(nodes[i].site_node);
            cands[i].required = nodes[i].required != 0;
            cands[i].free.share.resize(l.gpus);
            for (std::uint32_t g = 0; g < l.gpus; ++g) cands[i].free.share[g] = (nodes[i].free_gpus >> g & 1) ? 100 : 0;
        }
        pl::NodesRequest r;
        r.unit.ranks_per_unit = job->ranks_per_unit;
        r.unit.kind = static_cast<pl::Kind>(job->kind);
        r.unit.min_units = job->min_units;
        r.unit.max_units = job->max_units;
        r.units_per_node = units_per_node;
        r.min_nodes = min_nodes;
        r.max_nodes = max_nodes;
        auto chosen = pl::place_nodes(layouts, cands, r);
        if (!chosen) return fail(OMNI_EINVAL, chosen.error());
        for (const auto &c : chosen.value()) nodes[c.candidate].gpus = c.gpus;
        return static_cast<int>(chosen.value().size());
    });
}

}  // extern "C"
