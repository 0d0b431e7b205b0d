// Gloo pairs that take a connection only from the peer the authenticated rendezvous named.
//
// Gloo's TCP transport (as Debian ships it, 0.0~git20220518) gives every pair its own
// listening socket on an ephemeral port of the rank's address, from the pair's creation until
// its peer connects (a communicator's build), and takes the FIRST connection it accepts as
// the peer, unauthenticated: a stranger who connects first (a port scan finds the port) is the
// peer: Gloo closes the listener, so the real peer is refused and the build fails or hangs
// (until Gloo's connect timeout), and the stranger's bytes are parsed as Gloo frames (by
// Gloo's pair.cc, a frame for a slot nothing receives on fails a GLOO_ENFORCE in Gloo's device
// thread, which ends the process through std::terminate). Once built, no pair listens:
// connections are refused by the kernel.
//
// A guarded pair (make_guarded_context) publishes, next to its address and through the same
// authenticated channel (the coordinator's store, CurveZMQ; or a PMIx fence), a fresh random
// token of kPairTokenBytes. The connecting side sends the acceptor's token first; the
// listening side holds each accepted connection aside until that many bytes came, compares
// them in constant time (never early: a byte-by-byte answer would leak the token), and only
// then hands the socket to Gloo. Anything else is closed: a wrong token at once, silence or a
// partial token after kPairHandshake, past kMaxPendingPerPair held connections the oldest.
// Tokens are new for every communicator, so a captured one is worth nothing later.
//
// Gloo from 2023-05 on (Debian 13's 0.5.0 and unstable's; gloo/transport/tcp/listener.h)
// shares ONE listener per device instead: a connection writes an 8-byte sequence number and
// the listener hands it to the pair waiting for that number or keeps it for ever. Sequence
// numbers count from 0, so a stranger could take a pair or pile up descriptors. There a
// guarded pair listens on a door of its own (pair_doors.h: the same token, checks and
// bounds, enforced by one doorman thread of the process at any time, not only while the rank
// is inside connect), publishes the door's address instead of Gloo's, and makes the
// connection itself: the higher rank of the two dials the lower's door and sends its token,
// the lower takes what its door hands over; then the socket goes to Gloo (connectCallback)
// as Gloo's own connect would. Gloo's device listener, unused, is closed when the guarded
// context is made (gloo_guard_shared.inc).
//
// PyTorch's own Gloo group (omni.torch) rendezvouses through Gloo's connectFullMesh, which
// publishes nothing but each pair's address().bytes() and hands the peer's bytes to
// pair->connect(). A guarded device (make_guarded_device) makes contexts whose pairs carry
// their token there: address().bytes() is Gloo's address (or the door's) followed by the
// token, and connect() takes the token off the end (Gloo sizes each address from the total:
// all are the same length). Where Gloo's tcp::Context rendezvouses by itself
// (createAndConnectAllPairs, Gloo from 2024 on: one device address and sequence numbers,
// no room for a token), the guarded context uses Gloo's generic per-pair route instead.
//
// Not covered: the connected pairs carry Gloo's frames in clear and unauthenticated, like any
// plain TCP: an attacker on the path who can inject into or reset an established connection
// is out of reach from outside Gloo (a reset fails the collective: the job rewinds).
#ifndef OMNI_LAUNCHER_COMM_GLOO_GUARD_H
#define OMNI_LAUNCHER_COMM_GLOO_GUARD_H

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>

#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/attr.h>

namespace omni::launcher {

constexpr std::size_t kPairTokenBytes = 16;
using PairToken = std::array<unsigned char, kPairTokenBytes>;
// How long an accepted connection may take to send its token. The real peer sends it as its
// connect completes; the bound only matters to what a stranger can hold.
constexpr std::chrono::milliseconds kPairHandshake{2000};
// Accepted connections held per listening pair while they owe their token.
constexpr std::size_t kMaxPendingPerPair = 8;

// True where this Gloo's pairs are guarded: every Gloo libomni builds with (Debian 12's, each
// pair with its own listener; and Gloo from 2023-05 on, through doors).
bool gloo_pairs_guarded();

// A transport context whose pairs are guarded (plain Gloo pairs for a device that is not TCP).
std::shared_ptr<gloo::transport::Context> make_guarded_context(
    const std::shared_ptr<gloo::transport::Device> &device, int rank, int size);

// A TCP device (Gloo's tcp::CreateDevice(attr), which may throw) whose contexts are guarded
// and carry each pair's token in its address bytes (see above), for a rendezvous that only
// passes pair addresses through an authenticated store (Gloo's connectFullMesh, PyTorch's
// ProcessGroupGloo). Each context it makes is meant for one build: contexts of Gloo from
// 2023-05 on retire the device's own listener.
std::shared_ptr<gloo::transport::Device> make_guarded_device(const gloo::transport::tcp::attr &attr);

// The token a connection to `pair` must send first (zeros for an unguarded pair).
PairToken own_token(gloo::transport::Pair &pair);
// The peer's token for this pair, from the rendezvous; before pair.connect().
void set_peer_token(gloo::transport::Pair &pair, const PairToken &token);

// How many connections guarded pairs of this process have refused so far (for tests).
std::size_t refused_pair_connections();

}  // namespace omni::launcher

#endif
