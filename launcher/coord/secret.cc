// The per-job secret and the job's private directory; see secret.h.
#include "coord/secret.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/parse.h"
#include "coord/wire.h"

namespace omni::launcher {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

// Closes a file descriptor on every return path.
struct Fd {
    int fd = -1;
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};

Status check_private_stat(const std::string &path, const struct stat &st, bool want_dir) {
    if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
        return make_error(path + ": not a " + (want_dir ? "directory" : "regular file"));
    if (st.st_uid != ::geteuid())
        return make_error(path + ": owned by uid " + std::to_string(st.st_uid) + ", not by uid " +
                          std::to_string(::geteuid()));
    if (st.st_mode & 077)
        return make_error(path + ": group or others have access (mode " +
                          std::to_string((st.st_mode >> 6) & 7) +
                          std::to_string((st.st_mode >> 3) & 7) + std::to_string(st.st_mode & 7) +
                          "); it must be private to its owner");
    return Status::success();
}

}  // namespace

Result<std::string> generate_secret() {
    unsigned char buf[32];
    std::size_t got = 0;
    while (got < sizeof buf) {
        ssize_t n = ::getrandom(buf + got, sizeof buf - got, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return make_error("getrandom: " + errno_text(errno));
        }
        got += static_cast<std::size_t>(n);
    }
    static const char hex[] = "0123456789abcdef";
    std::string out;
    out.reserve(64);
    for (unsigned char c : buf) {
        out.push_back(hex[c >> 4]);
        out.push_back(hex[c & 15]);
    }
    return out;
}

Status check_secret_format(std::string_view s) {
    if (s.size() != 64) return make_error("job secret: must be 64 hex digits");
    for (char c : s)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return make_error("job secret: must be 64 lowercase hex digits");
    return Status::success();
}

bool secrets_equal(std::string_view a, std::string_view b) {
    // The length of the expected secret is public (64); only the content must not leak.
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    std::size_t n = a.size() < b.size() ? a.size() : b.size();
    for (std::size_t i = 0; i < n; ++i)
        diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    return diff == 0;
}

Status ensure_private_dir(const std::string &path, bool *created) {
    if (created) *created = false;
    if (path.empty() || path[0] != '/') return make_error("job directory '" + path + "': must be absolute");
    if (path.size() > 4000) return make_error("job directory: path too long");
    // Create missing parents (0700): /tmp/omni-UID is ours too.
    for (std::size_t pos = 1; pos <= path.size(); ++pos) {
        if (pos != path.size() && path[pos] != '/') continue;
        std::string part = path.substr(0, pos);
        if (::mkdir(part.c_str(), 0700) == 0) {
            if (created && pos == path.size()) *created = true;
        } else if (errno != EEXIST) {
            return make_error(part + ": mkdir: " + errno_text(errno));
        }
    }
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return make_error(path + ": " + errno_text(errno));
    if (S_ISLNK(st.st_mode)) return make_error(path + ": is a symbolic link");
    // Whoever controls the parent can swap the directory: it must be root's (like /tmp,
    // sticky) or ours and closed to others.
    std::string parent = path.substr(0, path.find_last_of('/'));
    if (parent.empty()) parent = "/";
    struct stat pst;
    if (::stat(parent.c_str(), &pst) != 0) return make_error(parent + ": " + errno_text(errno));
    bool root_sticky_or_closed = pst.st_uid == 0 && ((pst.st_mode & S_ISVTX) || !(pst.st_mode & 022));
    bool ours_closed = pst.st_uid == ::geteuid() && !(pst.st_mode & 022);
    if (!root_sticky_or_closed && !ours_closed)
        return make_error(parent + ": others could replace " + path +
                          " (the parent must be root's or private to uid " +
                          std::to_string(::geteuid()) + ")");
    return check_private_stat(path, st, true);
}

Status write_private_file(const std::string &dir, const std::string &name,
                          std::string_view content) {
    if (auto st = ensure_private_dir(dir); !st) return st;
    std::string final_path = dir + "/" + name;
    std::string tmp = final_path + ".tmp." + std::to_string(::getpid());
    ::unlink(tmp.c_str());  // a leftover of a crashed predecessor with the same pid
    Fd f;
    f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (f.fd < 0) return make_error(tmp + ": " + errno_text(errno));
    std::size_t off = 0;
    while (off < content.size()) {
        ssize_t n = ::write(f.fd, content.data() + off, content.size() - off);
        if (n < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            ::unlink(tmp.c_str());
            return make_error(tmp + ": write: " + errno_text(e));
        }
        off += static_cast<std::size_t>(n);
    }
    if (::fsync(f.fd) != 0 || ::rename(tmp.c_str(), final_path.c_str()) != 0) {
        int e = errno;
        ::unlink(tmp.c_str());
        return make_error(final_path + ": " + errno_text(e));
    }
    return Status::success();
}

Result<std::string> read_private_file(const std::string &path, std::size_t max_bytes) {
    Fd f;
    f.fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (f.fd < 0) return make_error(path + ": " + errno_text(errno));
    struct stat st;
    if (::fstat(f.fd, &st) != 0) return make_error(path + ": " + errno_text(errno));
    if (auto s = check_private_stat(path, st, false); !s) return Error{s.error()};
    if (static_cast<std::uint64_t>(st.st_size) > max_bytes)
        return make_error(path + ": longer than " + std::to_string(max_bytes) + " bytes");
    std::string out(static_cast<std::size_t>(st.st_size), '\0');
    std::size_t off = 0;
    while (off < out.size()) {
        ssize_t n = ::read(f.fd, out.data() + off, out.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return make_error(path + ": short read");
        off += static_cast<std::size_t>(n);
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

Result<std::string> job_dir_from_env(const char *(*get)(const char *)) {
    if (const char *d = get(kEnvJobDir); d && *d) {
        if (auto st = check_env_value(kEnvJobDir, d); !st) return Error{st.error()};
        if (d[0] != '/') return make_error(std::string(kEnvJobDir) + "='" + d + "': must be absolute");
        return std::string(d);
    }
    const char *job = get("SLURM_JOB_ID");
    if (!job || !*job)
        return make_error(std::string("no job directory: set ") + kEnvJobDir +
                          " or run inside a Slurm job (SLURM_JOB_ID)");
    auto id = parse_uint(job, 1, UINT32_MAX, "SLURM_JOB_ID");
    if (!id) return Error{id.error()};
    // Job ids are unique per cluster only: two clusters whose jobs share a node (or a test
    // machine running several) would otherwise share a directory.
    std::string cluster;
    if (const char *c = get("SLURM_CLUSTER_NAME"); c && *c) {
        cluster = c;
        const bool ok = cluster.size() <= 64 && std::all_of(cluster.begin(), cluster.end(), [](char ch) {
            return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                   ch == '_' || ch == '-' || ch == '.';
        });
        if (!ok || cluster == "." || cluster == "..")
            return make_error("SLURM_CLUSTER_NAME: " + omni::quoted(cluster) +
                              ": expected 1..64 letters, digits, '_', '-' or '.'");
    }
    return default_job_dir(::geteuid(), cluster, static_cast<std::uint32_t>(id.value()));
}

std::string default_job_dir(std::uint32_t uid, const std::string &cluster, std::uint32_t job_id) {
    return "/tmp/omni-" + std::to_string(uid) + "/job-" + (cluster.empty() ? "" : cluster + "-") +
           std::to_string(job_id);
}

Status publish_job_files(const std::string &dir, const std::string &secret,
                         const std::string &endpoint) {
    if (auto st = check_secret_format(secret); !st) return st;
    if (auto e = parse_endpoint(endpoint, false); !e) return Error{e.error()};
    // The secret first: a reader that finds the address can rely on the secret being there.
    if (auto st = write_private_file(dir, kSecretFile, secret + "\n"); !st) return st;
    return write_private_file(dir, kAddressFile, endpoint + "\n");
}

Result<CoordinatorLocation> locate_coordinator(const std::string &address, const std::string &dir,
                                               const char *(*get)(const char *)) {
    CoordinatorLocation loc;
    std::string d = dir;
    auto need_dir = [&]() -> Status {
        if (!d.empty()) return Status::success();
        auto e = job_dir_from_env(get);
        if (!e) return Error{e.error()};
        d = e.value();
        return Status::success();
    };
    const char *env_addr = get(kEnvCoordAddr);
    const char *env_secret = get(kEnvCoordSecret);
    if (!address.empty()) {
        loc.endpoint = address;
    } else if (env_addr && *env_addr && dir.empty()) {
        loc.endpoint = env_addr;
    } else {
        if (auto st = need_dir(); !st) return Error{st.error()};
        auto a = read_private_file(d + "/" + kAddressFile, 256);
        if (!a)
            return make_error("cannot find the coordinator: " + a.error() +
                              (a.error().find("No such file") != std::string::npos
                                   ? " (is omni-launch running in this job?)"
                                   : ""));
        loc.endpoint = a.value();
    }
    if (env_secret && *env_secret && dir.empty()) {
        loc.secret = env_secret;
    } else {
        if (auto st = need_dir(); !st) return Error{st.error()};
        auto s = read_private_file(d + "/" + kSecretFile, 256);
        if (!s) return make_error("cannot read the job secret: " + s.error());
        loc.secret = s.value();
    }
    if (auto e = parse_endpoint(loc.endpoint, false); !e) return Error{e.error()};
    if (auto st = check_secret_format(loc.secret); !st) return Error{st.error()};
    return loc;
}

}  // namespace omni::launcher
