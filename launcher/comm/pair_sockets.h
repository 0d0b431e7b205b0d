// The sockets of a Gloo communicator's pairs, found from outside Gloo, so that another thread
// can end every operation pending on them (Communicator::abort).
//
// Gloo's public API gives no pair's descriptor, and its only call that fails a pair's pending
// operations is protected. shutdown(2) works from any thread: Gloo's device loop then reads
// end-of-file on the socket and fails everything pending on that pair ("Connection closed by
// peer"), as a peer's close would; the peer reads end-of-file too. The sockets are told by
// their inodes, found as the connected TCP sockets that appeared in this process while the
// pairs were connected, on the rank's own address: a descriptor number may be reused once Gloo
// closes it, an inode is not.
#ifndef OMNI_LAUNCHER_COMM_PAIR_SOCKETS_H
#define OMNI_LAUNCHER_COMM_PAIR_SOCKETS_H

#include <sys/socket.h>
#include <sys/types.h>

#include <set>
#include <string>

namespace omni::launcher {

// The inodes of every socket this process has open now (/proc/self/fd). Empty when /proc is
// not mounted.
std::set<ino_t> socket_inodes();

// Those of `fresh` that are connected TCP sockets (not listening) whose local address has the
// host part of `local` (its port is not compared); with `local` null, on any address.
std::set<ino_t> connected_tcp_on(const std::set<ino_t> &fresh, const sockaddr_storage *local);

// "LOCAL->PEER" of each socket in `inodes` (IPv4 and IPv6 TCP), space-separated, for logs.
std::string describe_sockets(const std::set<ino_t> &inodes);

// Those of `inodes` whose peer is not `peer` ("HOST:PORT" as describe_sockets writes it).
std::set<ino_t> not_connected_to(const std::set<ino_t> &inodes, const std::string &peer);

// shutdown(SHUT_RDWR) of every socket of this process whose inode is in `inodes`. Returns
// how many it shut down.
int shutdown_sockets(const std::set<ino_t> &inodes);

}  // namespace omni::launcher

#endif
