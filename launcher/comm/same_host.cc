#include "comm/same_host.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace omni::launcher {

namespace {

// "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx\n" -> 16 bytes; false on anything else.
bool read_boot_id(std::uint8_t out[16]) {
    const int fd = ::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char text[64] = {};
    const ssize_t n = ::read(fd, text, sizeof text - 1);
    ::close(fd);
    if (n < 32) return false;
    int got = 0;
    for (ssize_t i = 0; i < n && got < 32; ++i) {
        const char c = text[i];
        if (c == '-') continue;
        int v;
        if (c >= '0' && c <= '9') v = c - '0';
        else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
        else return false;
        out[got / 2] = static_cast<std::uint8_t>(got % 2 ? out[got / 2] | v : v << 4);
        ++got;
    }
    return got == 32;
}

}  // namespace

HostRecord local_host_record(const std::uint64_t *nonce_word) {
    HostRecord r;
    struct stat ns{}, net{};
    if (!nonce_word || !read_boot_id(r.boot_id) || ::stat("/proc/self/ns/pid", &ns) != 0 ||
        ::stat("/proc/self/ns/net", &net) != 0)
        return HostRecord{};
    r.pidns_dev = ns.st_dev;
    r.pidns_ino = ns.st_ino;
    r.netns_dev = net.st_dev;
    r.netns_ino = net.st_ino;
    r.nonce_addr = reinterpret_cast<std::uintptr_t>(nonce_word);
    r.nonce = *nonce_word;
    r.pid = static_cast<std::int32_t>(::getpid());
    return r;
}

bool same_kernel(const HostRecord &self, const HostRecord &peer) {
    return self.pid > 0 && peer.pid > 0 &&
           std::memcmp(self.boot_id, peer.boot_id, sizeof self.boot_id) == 0 &&
           self.pidns_dev == peer.pidns_dev && self.pidns_ino == peer.pidns_ino &&
           self.netns_dev == peer.netns_dev && self.netns_ino == peer.netns_ino;
}

Status probe_peer(const HostRecord &peer) {
    // The pid alone could name an unrelated process (the peer exited and its pid was reused):
    // the random word at the published address is what identifies the peer.
    std::uint64_t word = 0;
    if (auto st = read_from_process(peer.pid, &word, peer.nonce_addr, sizeof word); !st) return st;
    if (word != peer.nonce)
        return make_error("pid " + std::to_string(peer.pid) + " does not hold the peer's probe word");
    return Status::success();
}

Status read_from_process(int pid, void *dst, std::uint64_t remote_addr, std::size_t bytes) {
    auto *out = static_cast<char *>(dst);
    std::size_t done = 0;
    while (done < bytes) {
        // The kernel may copy less than asked (it works in page batches): go on from there.
        iovec local{out + done, bytes - done};
        iovec remote{reinterpret_cast<void *>(static_cast<std::uintptr_t>(remote_addr + done)), bytes - done};
        const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int err = n < 0 ? errno : EFAULT;
            return make_error("process_vm_readv of " + std::to_string(bytes - done) + " bytes from pid " +
                              std::to_string(pid) + ": " + std::strerror(err));
        }
        done += static_cast<std::size_t>(n);
    }
    return Status::success();
}

}  // namespace omni::launcher
