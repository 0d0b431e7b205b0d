// The coordinator's key/value rendezvous store: what Gloo's rendezvous (and NCCL unique-id
// exchange) needs, partitioned by generation so that a new communicator of generation g+1
// can never read an address left behind by generation g under the same key ("0", "1", ...).
// Pure data structure with hard limits on keys and bytes; the service owns one.
#ifndef OMNI_LAUNCHER_KV_STORE_H
#define OMNI_LAUNCHER_KV_STORE_H

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "omni/result.h"

namespace omni::launcher {

struct KvLimits {
    std::size_t max_keys = 65536;
    std::size_t max_bytes = 64u << 20;  // keys + values
};

class KvStore {
public:
    explicit KvStore(KvLimits limits = {}) : limits_(limits) {}
    // Sets (or replaces) a value. Errors when a limit would be exceeded; the store is then
    // unchanged.
    Status set(std::uint64_t generation, std::string_view key, std::string_view value);
    // nullptr when absent.
    const std::string *get(std::uint64_t generation, std::string_view key) const;
    bool has_all(std::uint64_t generation, const std::vector<std::string> &keys) const;
    // Forgets every generation below `generation` (called when a new generation forms).
    void drop_below(std::uint64_t generation);
    std::size_t keys() const { return map_.size(); }
    std::size_t bytes() const { return bytes_; }

private:
    KvLimits limits_;
    std::map<std::pair<std::uint64_t, std::string>, std::string, std::less<>> map_;
    std::size_t bytes_ = 0;
};

}  // namespace omni::launcher

#endif
