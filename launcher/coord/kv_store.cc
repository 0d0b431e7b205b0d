// The generation-partitioned key/value store; see kv_store.h.
#include "coord/kv_store.h"

namespace omni::launcher {

Status KvStore::set(std::uint64_t generation, std::string_view key, std::string_view value) {
    auto k = std::make_pair(generation, std::string(key));
    auto it = map_.find(k);
    std::size_t old = it == map_.end() ? 0 : it->first.second.size() + it->second.size();
    std::size_t now = key.size() + value.size();
    if (it == map_.end() && map_.size() >= limits_.max_keys)
        return make_error("kv store: full (" + std::to_string(limits_.max_keys) + " keys)");
    if (bytes_ - old + now > limits_.max_bytes)
        return make_error("kv store: full (" + std::to_string(limits_.max_bytes) + " bytes)");
    bytes_ = bytes_ - old + now;
    if (it == map_.end()) map_.emplace(std::move(k), std::string(value));
    else it->second.assign(value);
    return Status::success();
}

const std::string *KvStore::get(std::uint64_t generation, std::string_view key) const {
    auto it = map_.find(std::make_pair(generation, std::string(key)));
    return it == map_.end() ? nullptr : &it->second;
}

bool KvStore::has_all(std::uint64_t generation, const std::vector<std::string> &keys) const {
    for (const auto &k : keys)
        if (!get(generation, k)) return false;
    return true;
}

void KvStore::drop_below(std::uint64_t generation) {
    for (auto it = map_.begin(); it != map_.end() && it->first.first < generation;) {
        bytes_ -= it->first.second.size() + it->second.size();
        it = map_.erase(it);
    }
}

}  // namespace omni::launcher
