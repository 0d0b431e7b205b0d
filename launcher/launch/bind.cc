// The coordinator's bind address; see launch/bind.h.
#include "launch/bind.h"

#include <cstring>
#include <memory>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include "slurmjob/proc.h"

namespace omni::launcher {
namespace {

bool is_literal_ipv4(const std::string &s, in_addr &out) {
    return s.size() <= 15 && ::inet_pton(AF_INET, s.c_str(), &out) == 1;
}

Status usable_for_bind(const std::string &ip, const in_addr &a) {
    std::uint32_t h = ntohl(a.s_addr);
    if (h == 0) return make_error("address " + ip + " is the wildcard; the coordinator binds only to node addresses");
    if (h == 0xffffffffu) return make_error("address " + ip + " is the broadcast address");
    if ((h >> 28) == 0xe) return make_error("address " + ip + " is a multicast address");
    return Status::success();
}

}  // namespace

Result<std::string> node_addr_from_scontrol(const std::string &output, const std::string &node) {
    // One line per node with -o: "NodeName=n1 Arch=... NodeAddr=127.0.0.1 NodeHostName=...".
    std::size_t pos = 0;
    while (pos < output.size()) {
        std::size_t end = output.find('\n', pos);
        if (end == std::string::npos) end = output.size();
        std::string line = output.substr(pos, end - pos);
        pos = end + 1;
        if (line.rfind("NodeName=" + node + " ", 0) != 0) continue;
        std::size_t at = line.find(" NodeAddr=");
        if (at == std::string::npos) break;
        at += std::strlen(" NodeAddr=");
        std::string addr = line.substr(at, line.find(' ', at) - at);
        if (addr.empty()) break;
        return addr;
    }
    return make_error("scontrol shows no NodeAddr for node '" + node + "'");
}

Result<std::string> bind_address_for(const std::string &host_or_ip) {
    if (host_or_ip.empty() || host_or_ip.size() > 253)
        return make_error("address '" + host_or_ip.substr(0, 64) + "': empty or too long");
    in_addr a{};
    if (is_literal_ipv4(host_or_ip, a)) {
        if (auto st = usable_for_bind(host_or_ip, a); !st) return Error{st.error()};
        return host_or_ip;
    }
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo *res = nullptr;
    int rc = ::getaddrinfo(host_or_ip.c_str(), nullptr, &hints, &res);
    if (rc != 0 || !res)
        return make_error("cannot resolve '" + host_or_ip + "' to an IPv4 address: " +
                          (rc ? ::gai_strerror(rc) : "no address"));
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, &::freeaddrinfo);
    a = reinterpret_cast<const sockaddr_in *>(res->ai_addr)->sin_addr;
    char buf[INET_ADDRSTRLEN];
    if (!::inet_ntop(AF_INET, &a, buf, sizeof buf)) return make_error("inet_ntop failed");
    std::string ip = buf;
    if (auto st = usable_for_bind(ip + " (from '" + host_or_ip + "')", a); !st) return Error{st.error()};
    return ip;
}

Result<std::string> node_bind_address(const std::string &node, std::int64_t timeout_ms) {
    auto out = run_capture({"scontrol", "show", "node", "-o", node}, timeout_ms);
    if (out) {
        auto addr = node_addr_from_scontrol(out.value(), node);
        if (!addr) return Error{addr.error()};
        auto ip = bind_address_for(addr.value());
        if (!ip) return make_error("NodeAddr of node '" + node + "': " + ip.error());
        return ip;
    }
    auto ip = bind_address_for(node);
    if (!ip)
        return make_error("no address for node '" + node + "' (" + out.error() + "; " + ip.error() +
                          "); give one with --bind");
    return ip;
}

}  // namespace omni::launcher
