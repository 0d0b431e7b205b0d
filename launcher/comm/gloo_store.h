// A gloo::rendezvous::Store backed by the coordinator's key/value store, bound to one
// generation: Gloo's full-mesh rendezvous writes each rank's address under its rank number,
// and the coordinator keeps those keys per generation, so the context of generation g+1
// never sees the addresses of generation g. A fresh store object per generation.
//
// Gloo's interface reports failures by exception; this class throws gloo::IoException with
// the coordinator's message (inside C++ code only; the C API catches everything).
#ifndef OMNI_LAUNCHER_GLOO_STORE_H
#define OMNI_LAUNCHER_GLOO_STORE_H

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "coord/client.h"

namespace omni::launcher {

class CoordinatorStore : public gloo::rendezvous::Store {
public:
    // `client` must outlive the store and be used by this thread only. `prefix` goes before
    // every key, so that several groups of one generation rendezvous apart (a data-parallel
    // group per model-parallel index: "dp1/").
    CoordinatorStore(CoordinatorClient &client, std::uint64_t generation,
                     std::chrono::milliseconds timeout = kDefaultTimeout, std::string prefix = {})
        : client_(client), generation_(generation), timeout_(timeout), prefix_(std::move(prefix)) {}

    void set(const std::string &key, const std::vector<char> &data) override;
    // Waits (up to the store's timeout) for the key, as Gloo's own stores do.
    std::vector<char> get(const std::string &key) override;
    void wait(const std::vector<std::string> &keys) override;
    void wait(const std::vector<std::string> &keys,
              const std::chrono::milliseconds &timeout) override;

private:
    CoordinatorClient &client_;
    std::uint64_t generation_;
    std::chrono::milliseconds timeout_;
    std::string prefix_;
};

}  // namespace omni::launcher

#endif
