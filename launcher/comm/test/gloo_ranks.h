// Test helper: n Gloo ranks as threads of this process on 127.0.0.1, rendezvous through
// Gloo's in-memory HashStore. body(comm) runs on each; then every rank meets at a barrier,
// as a runtime's ranks do at the next step's first collective, so that no rank tears its
// communicator down while a peer still connects to it or reads from it.
#ifndef OMNI_LAUNCHER_TEST_GLOO_RANKS_H
#define OMNI_LAUNCHER_TEST_GLOO_RANKS_H

#include <gtest/gtest.h>
#include <gloo/rendezvous/hash_store.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm.h"

namespace omni::launcher::test {

// options(rank) gives each rank's options (default: GlooOptions{} with a 20 s timeout).
inline void on_gloo_ranks(int n, const std::function<void(Communicator &)> &body,
                          const std::function<GlooOptions(int)> &options = {}) {
    gloo::rendezvous::HashStore store;
    std::vector<std::thread> threads;
    std::vector<std::string> errors(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            GlooOptions o;
            if (options) o = options(r);
            o.timeout = std::chrono::milliseconds(20000);
            auto c = make_gloo_communicator(store, r, n, o);
            if (!c) {
                errors[static_cast<std::size_t>(r)] = c.error();
                return;
            }
            body(*c.value());
            EXPECT_TRUE(c.value()->barrier().ok());
        });
    for (auto &t : threads) t.join();
    for (const auto &e : errors) EXPECT_EQ(e, "");
}

}  // namespace omni::launcher::test

#endif
