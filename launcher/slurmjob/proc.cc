// Child processes for omni-launch; see launch/proc.h.
#include "slurmjob/proc.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace omni::launcher {
namespace {

std::vector<char *> c_array(const std::vector<std::string> &v) {
    std::vector<char *> out;
    out.reserve(v.size() + 1);
    for (const auto &s : v) out.push_back(const_cast<char *>(s.c_str()));
    out.push_back(nullptr);
    return out;
}

// Owns posix_spawn's file actions for one call.
struct FileActions {
    posix_spawn_file_actions_t fa;
    bool ok = false;
    FileActions() { ok = posix_spawn_file_actions_init(&fa) == 0; }
    ~FileActions() {
        if (ok) posix_spawn_file_actions_destroy(&fa);
    }
};

Result<pid_t> spawn_with(const std::vector<std::string> &argv, const std::vector<std::string> &env,
                         int stdout_fd, int stderr_fd = -1) {
    if (argv.empty()) return make_error("spawn: empty command");
    FileActions fa;
    if (!fa.ok) return make_error("spawn " + argv[0] + ": posix_spawn_file_actions_init failed");
    if (posix_spawn_file_actions_addopen(&fa.fa, 0, "/dev/null", O_RDONLY, 0) != 0)
        return make_error("spawn " + argv[0] + ": cannot redirect stdin");
    if (stdout_fd >= 0 && posix_spawn_file_actions_adddup2(&fa.fa, stdout_fd, 1) != 0)
        return make_error("spawn " + argv[0] + ": cannot redirect stdout");
    if (stderr_fd >= 0 && posix_spawn_file_actions_adddup2(&fa.fa, stderr_fd, 2) != 0)
        return make_error("spawn " + argv[0] + ": cannot redirect stderr");
    auto args = c_array(argv);
    auto envp = c_array(env);
    pid_t pid = -1;
    int rc = posix_spawnp(&pid, argv[0].c_str(), &fa.fa, nullptr, args.data(), envp.data());
    if (rc != 0) return make_error("cannot start " + argv[0] + ": " + std::strerror(rc));
    return pid;
}

}  // namespace

std::vector<std::string> environment_with(const std::map<std::string, std::string> &set,
                                          const std::vector<std::string> &remove) {
    std::vector<std::string> out;
    for (char **e = environ; e && *e; ++e) {
        std::string entry = *e;
        auto eq = entry.find('=');
        if (eq == std::string::npos) continue;
        std::string name = entry.substr(0, eq);
        if (set.count(name) || std::find(remove.begin(), remove.end(), name) != remove.end()) continue;
        out.push_back(std::move(entry));
    }
    for (const auto &[k, v] : set) out.push_back(k + "=" + v);
    return out;
}

Result<pid_t> spawn(const std::vector<std::string> &argv, const std::vector<std::string> &env) {
    return spawn_with(argv, env, -1);
}

Result<pid_t> spawn_to_file(const std::vector<std::string> &argv, const std::vector<std::string> &env,
                            const std::string &path) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return make_error("cannot write " + path + ": " + std::strerror(errno));
    auto pid = spawn_with(argv, env, fd, fd);
    ::close(fd);
    return pid;
}

std::optional<int> try_reap(pid_t pid) {
    int status = 0;
    for (;;) {
        pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid) return status;
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == ECHILD) return 0x7f00;  // already reaped elsewhere: report exit 127
        return std::nullopt;
    }
}

int exit_code_of(int wait_status) {
    if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
    if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
    return 1;
}

Result<std::string> run_capture(const std::vector<std::string> &argv, std::int64_t timeout_ms,
                                std::size_t max_bytes, const std::vector<std::string> &unset,
                                const std::map<std::string, std::string> &set) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return make_error("pipe: " + std::string(std::strerror(errno)));
    std::vector<std::string> env = environment_with(set, unset);
    auto pid = spawn_with(argv, env, fds[1]);
    ::close(fds[1]);
    if (!pid) {
        ::close(fds[0]);
        return Error{pid.error()};
    }
    const std::string what = argv[0] + (argv.size() > 1 ? " " + argv[1] : std::string());
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    bool timed_out = false;
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now())
                        .count();
        if (left <= 0) {
            timed_out = true;
            break;
        }
        struct pollfd p{fds[0], POLLIN, 0};
        int r = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left, INT_MAX)));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue;
        char buf[4096];
        ssize_t n = ::read(fds[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;  // EOF: the command closed its stdout
        if (out.size() + static_cast<std::size_t>(n) > max_bytes) {
            ::close(fds[0]);
            ::kill(pid.value(), SIGKILL);
            ::waitpid(pid.value(), nullptr, 0);
            return make_error(what + ": more than " + std::to_string(max_bytes) + " bytes of output");
        }
        out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    // After EOF the command normally exits at once; the deadline still bounds the wait.
    int status = 0;
    for (;;) {
        if (auto st = try_reap(pid.value())) {
            status = *st;
            break;
        }
        if (timed_out || std::chrono::steady_clock::now() >= deadline) {
            ::kill(pid.value(), SIGKILL);
            ::waitpid(pid.value(), nullptr, 0);
            return make_error(what + ": no answer within " + std::to_string(timeout_ms) + " ms");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (exit_code_of(status) != 0)
        return make_error(what + ": exit status " + std::to_string(exit_code_of(status)));
    return out;
}

Result<std::string> self_executable() {
    char buf[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return make_error("/proc/self/exe: " + std::string(std::strerror(errno)));
    return std::string(buf, static_cast<std::size_t>(n));
}

}  // namespace omni::launcher
