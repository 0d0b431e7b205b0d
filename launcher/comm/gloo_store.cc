// The coordinator-backed Gloo store; see gloo_store.h.
#include "comm/gloo_store.h"

#include <gloo/common/error.h>

namespace omni::launcher {

void CoordinatorStore::set(const std::string &key, const std::vector<char> &data) {
    auto st = client_.kv_set(generation_, prefix_ + key, std::string(data.begin(), data.end()),
                             timeout_.count());
    if (!st) throw gloo::IoException("coordinator store: set '" + key + "': " + st.error());
}

std::vector<char> CoordinatorStore::get(const std::string &key) {
    auto v = client_.kv_get(generation_, prefix_ + key, timeout_.count());
    if (!v) throw gloo::IoException("coordinator store: get '" + key + "': " + v.error());
    return std::vector<char>(v.value().begin(), v.value().end());
}

void CoordinatorStore::wait(const std::vector<std::string> &keys) { wait(keys, timeout_); }

void CoordinatorStore::wait(const std::vector<std::string> &keys,
                            const std::chrono::milliseconds &timeout) {
    // Gloo passes kNoTimeout (0 ms) for "the default"; bound every wait all the same.
    auto t = timeout.count() > 0 ? timeout : timeout_;
    // Large worlds ask for more keys than one request may carry: wait in chunks.
    for (std::size_t i = 0; i < keys.size(); i += kMaxWaitKeys) {
        std::vector<std::string> chunk;
        for (std::size_t k = i; k < std::min(keys.size(), i + kMaxWaitKeys); ++k) chunk.push_back(prefix_ + keys[k]);
        auto st = client_.kv_wait(generation_, chunk, t.count());
        if (!st) throw gloo::IoException("coordinator store: wait: " + st.error());
    }
}

}  // namespace omni::launcher
