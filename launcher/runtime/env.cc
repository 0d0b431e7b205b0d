// The rank's environment contract; see runtime/env.h.
#include "runtime/env.h"

#include "config.h"  // HAVE_NCCL

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/parse.h"
#include "coord/protocol.h"
#include "coord/secret.h"
#include "coord/wire.h"

namespace omni::launcher {

namespace {

Result<std::uint64_t> env_uint(const EnvLookup &get, const char *name, std::uint64_t min,
                               std::uint64_t max, std::uint64_t fallback) {
    const char *v = get(name);
    if (!v) return fallback;
    return parse_uint(v, min, max, name);
}

// Host names may hold characters a member id does not allow; keep the id readable anyway.
std::string sanitised_host() {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0) return "host";
    std::string out;
    for (const char *p = host; *p && out.size() < 64; ++p) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '-' || c == '_';
        out.push_back(ok ? c : '_');
    }
    return out.empty() ? "host" : out;
}

}  // namespace

std::string default_member_id(std::uint32_t unit, std::uint32_t slot) {
    return "u" + std::to_string(unit) + "s" + std::to_string(slot) + "-" +
           std::to_string(static_cast<long>(getpid())) + "@" + sanitised_host();
}

Result<std::string> local_address_towards(const std::string &ip) {
    sockaddr_in peer{};
    peer.sin_family = AF_INET;
    peer.sin_port = htons(9);  // any port: connect() on UDP only picks the route
    if (inet_pton(AF_INET, ip.c_str(), &peer.sin_addr) != 1)
        return make_error("'" + ip + "' is not an IPv4 address");
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return make_error(std::string("socket: ") + std::strerror(errno));
    sockaddr_in me{};
    socklen_t len = sizeof me;
    int rc = connect(fd, reinterpret_cast<sockaddr *>(&peer), sizeof peer);
    if (rc == 0) rc = getsockname(fd, reinterpret_cast<sockaddr *>(&me), &len);
    int err = errno;
    close(fd);
    if (rc != 0)
        return make_error("no route to " + ip + " for the Gloo address: " + std::strerror(err));
    char buf[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &me.sin_addr, buf, sizeof buf);
    return std::string(buf);
}

Result<RuntimeOptions> runtime_options_from_env(const EnvLookup &get,
                                                const ProcessIdentity &process) {
    RuntimeOptions o;
    auto job = job_options_from_job_env(get);
    if (!job) return Error{job.error()};
    o.job = job.value();
    o.unit_size = static_cast<std::uint32_t>(o.job.unit_size);
    if (o.job.mp == 0 || o.unit_size % o.job.mp != 0)
        return make_error("OMNI_MP=" + std::to_string(o.job.mp) + ": expected a divisor of OMNI_UNIT_SIZE=" +
                          std::to_string(o.unit_size) + " (model-parallel groups lie inside a unit)");
    o.mp = static_cast<std::uint32_t>(o.job.mp);
    o.process = process;

    const bool has_coordinator =
        get(kEnvCoordAddr) || get(kEnvCoordSecret) || get(kEnvJobDir);
    if (!has_coordinator) {
        if (process.size > 1)
            return make_error("this is rank " + std::to_string(process.rank) + " of " +
                              std::to_string(process.size) +
                              " processes but no coordinator is set (OMNI_COORD_ADDR, "
                              "OMNI_COORD_SECRET or OMNI_JOB_DIR): start the job with omni-launch");
        o.standalone = true;
        return o;
    }
    // locate_coordinator() takes a C function pointer; bridge the std::function through a
    // thread-local (the call is synchronous).
    static thread_local const EnvLookup *current = nullptr;
    current = &get;
    auto where = locate_coordinator("", "", [](const char *n) { return (*current)(n); });
    current = nullptr;
    if (!where) return Error{where.error()};
    o.endpoint = where.value().endpoint;
    o.secret = where.value().secret;

    // Unit and slot: explicit, else derived from the step rank.
    const char *uid = get("OMNI_UNIT_ID"), *usl = get("OMNI_UNIT_SLOT");
    std::uint64_t step_rank = process.rank;
    if (!process.from_pmix) {
        auto r = env_uint(get, "SLURM_PROCID", 0, kMaxWorld - 1, 0);
        if (!r) return Error{r.error()};
        step_rank = r.value();
    }
    if (uid && usl) {
        auto u = parse_uint(uid, 0, kMaxUnits - 1, "OMNI_UNIT_ID");
        if (!u) return Error{u.error()};
        auto s = parse_uint(usl, 0, o.unit_size - 1, "OMNI_UNIT_SLOT");
        if (!s) return Error{s.error() + " (OMNI_UNIT_SIZE is " + std::to_string(o.unit_size) + ")"};
        o.unit = static_cast<std::uint32_t>(u.value());
        o.slot = static_cast<std::uint32_t>(s.value());
    } else if (uid || usl) {
        return make_error(std::string(uid ? "OMNI_UNIT_ID" : "OMNI_UNIT_SLOT") +
                          " is set without " + (uid ? "OMNI_UNIT_SLOT" : "OMNI_UNIT_ID") +
                          ": set both, or neither to derive them from the step rank");
    } else {
        auto base = env_uint(get, "OMNI_UNIT_BASE", 0, kMaxUnits - 1, 0);
        if (!base) return Error{base.error()};
        std::uint64_t unit = base.value() + step_rank / o.unit_size;
        if (unit >= kMaxUnits)
            return make_error("unit id " + std::to_string(unit) + " (OMNI_UNIT_BASE " +
                              std::to_string(base.value()) + " + rank " +
                              std::to_string(step_rank) + " / unit size " +
                              std::to_string(o.unit_size) + ") exceeds " +
                              std::to_string(kMaxUnits - 1));
        o.unit = static_cast<std::uint32_t>(unit);
        o.slot = static_cast<std::uint32_t>(step_rank % o.unit_size);
    }

    if (const char *id = get("OMNI_MEMBER_ID")) {
        if (auto st = check_member_id(id); !st) return make_error("OMNI_MEMBER_ID: " + st.error());
        o.member_id = id;
    } else {
        o.member_id = default_member_id(o.unit, o.slot);
    }
    // Slurm's name for this node, so that omni-ctl shrink can release whole nodes. A name
    // the coordinator would refuse is an error here, where it names the variable.
    if (const char *node = get("SLURMD_NODENAME"); node && *node) {
        if (auto st = check_node_name(node); !st) return make_error("SLURMD_NODENAME: " + st.error());
        o.node = node;
    }

    if (const char *h = get("OMNI_GLOO_HOST")) {
        in_addr parsed{};
        if (std::strlen(h) > 15 || inet_pton(AF_INET, h, &parsed) != 1) return make_error("OMNI_GLOO_HOST='" + std::string(h).substr(0, 64) +
                                   "' is not a literal IPv4 address");
        o.gloo_host = h;
    } else {
        auto ep = parse_endpoint(o.endpoint, false);
        if (!ep) return Error{ep.error()};
        auto local = local_address_towards(ep.value().ip);
        if (!local) return Error{local.error()};
        o.gloo_host = local.value();
    }

    if (const char *c = get("OMNI_SAME_HOST_COPY")) {
        auto v = parse_choice(c, {"1", "0"}, "OMNI_SAME_HOST_COPY");
        if (!v) return Error{v.error()};
        o.same_host_copy = v.value() == "1";
    }

    if (const char *w = get("OMNI_MP_WIREUP")) {
        auto v = parse_choice(w, {"auto", "pmix", "coordinator"}, "OMNI_MP_WIREUP");
        if (!v) return Error{v.error()};
        o.mp_wireup = v.value();
    }

    if (const char *b = get("OMNI_COMM_BACKEND")) {
        auto c = parse_choice(b, {"gloo", "nccl"}, "OMNI_COMM_BACKEND");
        if (!c) return Error{c.error()};
        o.backend = c.value() == "nccl" ? CommBackend::nccl : CommBackend::gloo;
#ifndef HAVE_NCCL
        if (o.backend == CommBackend::nccl)
            return make_error("OMNI_COMM_BACKEND=nccl, but this libomni was built without NCCL");
#endif
    }
    auto dev = env_uint(get, "OMNI_CUDA_DEVICE", 0, 1023, 0);
    if (!dev) return Error{dev.error()};
    o.cuda_device = static_cast<int>(dev.value());

    constexpr std::uint64_t kDay = 24ULL * 3600 * 1000;
    auto jt = env_uint(get, "OMNI_JOIN_TIMEOUT_MS", 1, kDay, o.join_timeout_ms);
    auto bt = env_uint(get, "OMNI_BOUNDARY_TIMEOUT_MS", 1, kDay, o.boundary_timeout_ms);
    auto ct = env_uint(get, "OMNI_COMM_TIMEOUT_MS", 1, kDay, o.comm_timeout_ms);
    if (!jt) return Error{jt.error()};
    if (!bt) return Error{bt.error()};
    if (!ct) return Error{ct.error()};
    o.join_timeout_ms = static_cast<std::int64_t>(jt.value());
    o.boundary_timeout_ms = static_cast<std::int64_t>(bt.value());
    o.comm_timeout_ms = static_cast<std::int64_t>(ct.value());
    auto gh = env_uint(get, "OMNI_GLOO_TEST_HOLD_MS", 0, 60000, o.gloo_hold_ms);
    if (!gh) return Error{gh.error()};
    o.gloo_hold_ms = static_cast<std::int64_t>(gh.value());
    return o;
}

}  // namespace omni::launcher
