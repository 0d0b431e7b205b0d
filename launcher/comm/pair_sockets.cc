#include "comm/pair_sockets.h"

#include <dirent.h>
#include <arpa/inet.h>
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

std::set<ino_t> connected_tcp_on(const std::set<ino_t> &fresh, const sockaddr_storage *local) {
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
        if (local ? same_host(me, *local) : (me.ss_family == AF_INET || me.ss_family == AF_INET6)) out.insert(ino);
    });
    return out;
}

namespace {
std::string endpoint_text(const sockaddr_storage &a) {
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (a.ss_family == AF_INET) {
        const auto &v4 = reinterpret_cast<const sockaddr_in &>(a);
        ::inet_ntop(AF_INET, &v4.sin_addr, host, sizeof host);
        port = ntohs(v4.sin_port);
        return std::string(host) + ":" + std::to_string(port);
    }
    const auto &v6 = reinterpret_cast<const sockaddr_in6 &>(a);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, host, sizeof host);
    port = ntohs(v6.sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
}
}  // namespace

std::string describe_sockets(const std::set<ino_t> &inodes) {
    std::string out;
    each_socket([&](int fd, ino_t ino) {
        if (!inodes.count(ino)) return;
        sockaddr_storage me{}, peer{};
        socklen_t ml = sizeof me, pl = sizeof peer;
        if (::getsockname(fd, reinterpret_cast<sockaddr *>(&me), &ml) != 0 ||
            ::getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &pl) != 0 ||
            (me.ss_family != AF_INET && me.ss_family != AF_INET6))
            return;
        out += (out.empty() ? "" : " ") + endpoint_text(me) + "->" + endpoint_text(peer);
    });
    return out;
}

std::set<ino_t> not_connected_to(const std::set<ino_t> &inodes, const std::string &peer_text) {
    std::set<ino_t> out;
    each_socket([&](int fd, ino_t ino) {
        if (!inodes.count(ino)) return;
        sockaddr_storage peer{};
        socklen_t pl = sizeof peer;
        if (::getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &pl) == 0 &&
            (peer.ss_family == AF_INET || peer.ss_family == AF_INET6) && endpoint_text(peer) == peer_text)
            return;
        out.insert(ino);
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
