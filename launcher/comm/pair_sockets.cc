#include "comm/pair_sockets.h"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <functional>

namespace omni::launcher {

namespace {

// Calls f(fd, inode) for each descriptor of this process that is a socket.
void each_socket(const std::function<void(int, ino_t)> &f) {
    DIR *d = ::opendir("/proc/self/fd");
    if (!d) return;
    const int self = ::dirfd(d);
    while (const dirent *e = ::readdir(d)) {
        char *end = nullptr;
        const long fd = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end || fd == self) continue;
        struct stat st;
        if (::fstat(static_cast<int>(fd), &st) == 0 && S_ISSOCK(st.st_mode)) f(static_cast<int>(fd), st.st_ino);
    }
    ::closedir(d);
}

bool same_host(const sockaddr_storage &a, const sockaddr_storage &b) {
    if (a.ss_family != b.ss_family) return false;
    if (a.ss_family == AF_INET)
        return std::memcmp(&reinterpret_cast<const sockaddr_in &>(a).sin_addr,
                           &reinterpret_cast<const sockaddr_in &>(b).sin_addr, sizeof(in_addr)) == 0;
    if (a.ss_family == AF_INET6)
        return std::memcmp(&reinterpret_cast<const sockaddr_in6 &>(a).sin6_addr,
                           &reinterpret_cast<const sockaddr_in6 &>(b).sin6_addr, sizeof(in6_addr)) == 0;
    return false;
}

}  // namespace

std::set<ino_t> socket_inodes() {
    std::set<ino_t> out;
    each_socket([&](int, ino_t ino) { out.insert(ino); });
    return out;
}

std::set<ino_t> connected_tcp_on(const std::set<ino_t> &fresh, const sockaddr_storage &local) {
    std::set<ino_t> out;
    each_socket([&](int fd, ino_t ino) {
        if (!fresh.count(ino)) return;
        int type = 0, listening = 0;
        socklen_t len = sizeof type;
        if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) return;
        len = sizeof listening;
        if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening) return;
        sockaddr_storage me{}, peer{};
        socklen_t ml = sizeof me, pl = sizeof peer;
        if (::getsockname(fd, reinterpret_cast<sockaddr *>(&me), &ml) != 0) return;
        if (::getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &pl) != 0) return;   // not connected
        if (same_host(me, local)) out.insert(ino);
    });
    return out;
}

int shutdown_sockets(const std::set<ino_t> &inodes) {
    int n = 0;
    each_socket([&](int fd, ino_t ino) {
        if (inodes.count(ino) && ::shutdown(fd, SHUT_RDWR) == 0) ++n;
    });
    return n;
}

}  // namespace omni::launcher
