// BoundedMap: a map that forgets its oldest entries, for what a process remembers about the
// shards it wrote (index.cc). Header-only; not thread-safe (callers hold their own lock).
#ifndef OMNI_CKPT_BOUNDED_MAP_H
#define OMNI_CKPT_BOUNDED_MAP_H

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <list>
#include <map>
#include <optional>
#include <utility>

namespace omni {
namespace ckpt {

// A map that forgets its oldest entries beyond a number of entries or of bytes (each entry's
// size as its inserter estimates it). What a process remembers of the shards it wrote may
// never be asked for (with the ranks as processes, another process commits), so it must not
// grow with the length of the job; a forgotten entry only costs reading the file.
template <class Key, class Value>
class BoundedMap {
public:
    BoundedMap(std::size_t max_entries, std::uint64_t max_bytes)
        : max_entries_(max_entries), max_bytes_(max_bytes) {}
    // Adds or replaces k's entry (as the newest), then forgets the oldest entries until at
    // most max_entries and max_bytes remain; an entry larger than max_bytes is not kept.
    void put(const Key &k, Value v, std::uint64_t bytes) {
        erase(k);
        order_.push_back(k);
        entries_.emplace(k, Entry{std::move(v), bytes, std::prev(order_.end())});
        bytes_ += bytes;
        while (!order_.empty() && (entries_.size() > max_entries_ || bytes_ > max_bytes_)) erase(order_.front());
    }
    // Removes k's entry and returns its value, if there is one.
    std::optional<Value> take(const Key &k) {
        auto it = entries_.find(k);
        if (it == entries_.end()) return std::nullopt;
        std::optional<Value> v(std::move(it->second.value));
        erase(k);
        return v;
    }
    // k's value, valid until the next put or take; null if absent.
    const Value *find(const Key &k) const {
        auto it = entries_.find(k);
        return it == entries_.end() ? nullptr : &it->second.value;
    }
    std::size_t size() const { return entries_.size(); }
    std::uint64_t bytes() const { return bytes_; }

private:
    struct Entry {
        Value value;
        std::uint64_t bytes;
        typename std::list<Key>::iterator pos;
    };
    void erase(const Key &k) {
        auto it = entries_.find(k);
        if (it == entries_.end()) return;
        bytes_ -= it->second.bytes;
        order_.erase(it->second.pos);
        entries_.erase(it);
    }
    std::size_t max_entries_;
    std::uint64_t max_bytes_, bytes_ = 0;
    std::map<Key, Entry> entries_;
    std::list<Key> order_;   // oldest first
};

}  // namespace ckpt
}  // namespace omni

#endif
