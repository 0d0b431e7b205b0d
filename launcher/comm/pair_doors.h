// Listening sockets that hand over only a connection whose first bytes are their token.
//
// The guard of Gloo's pairs where Gloo shares one listener per device (gloo_guard.h): each
// guarded pair listens on a door of its own, and one thread of the process (the doorman,
// epoll over every open door) accepts on all of them at any time, whether or not the rank is
// inside the pair's connect: a rank that is still in its rendezvous, or held there, refuses
// strangers all the same. An accepted connection is held until kPairTokenBytes came, which
// are compared in constant time (never early: a byte-by-byte answer would leak the token);
// the right token hands the connection to the door's owner and closes the listener, anything
// else is closed: a wrong token at once, silence or a partial token after kPairHandshake,
// past kMaxPendingPerPair held connections the oldest. Memory is bounded: per door at most
// that many held connections of 16 bytes each; the doorman allocates nothing a stranger can
// grow.
#ifndef OMNI_LAUNCHER_COMM_PAIR_DOORS_H
#define OMNI_LAUNCHER_COMM_PAIR_DOORS_H

#include <sys/socket.h>

#include <array>
#include <chrono>
#include <memory>
#include <string>

namespace omni::launcher {

using DoorToken = std::array<unsigned char, 16>;
// Called (under the doorman's lock) for each connection a door closed without handing it
// over; `from` is the stranger's address, `why` the reason.
using DoorRefusal = void (*)(const std::string &from, const char *why);

struct DoorState;

class PairDoor {
public:
    // Listens on `host`'s address (its port is ignored: an ephemeral one) for a connection
    // that first sends `token`. Throws std::runtime_error when no socket can be made.
    PairDoor(const sockaddr_storage &host, const DoorToken &token, DoorRefusal refused);
    ~PairDoor();  // closes the listener and whatever it holds
    PairDoor(const PairDoor &) = delete;
    PairDoor &operator=(const PairDoor &) = delete;

    // Where the door listens (the host's address and the port).
    const sockaddr_storage &address() const { return address_; }

    // The connection that sent the token (a blocking-mode-agnostic descriptor the caller then
    // owns), waited for up to `timeout` (zero or less: no limit); -1 with `why` when none came.
    // The door is closed either way.
    int wait(std::chrono::milliseconds timeout, std::string &why);

    // Stops listening; connections held are closed as refused with `why` (nullptr: not
    // counted, e.g. at the end).
    void close(const char *why);

private:
    std::unique_ptr<DoorState> state_;
    sockaddr_storage address_{};
};

// "ADDR:PORT" or "[ADDR6]:PORT".
std::string door_endpoint_text(const sockaddr_storage &a);

}  // namespace omni::launcher

#endif
