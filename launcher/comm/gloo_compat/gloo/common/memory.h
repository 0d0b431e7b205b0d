// gloo/common/memory.h, for Gloo installs that lack it.
//
// Debian's libgloo-dev (0.0~git20220518.5b14351) installs tcp/pair.h, tcp/context.h and
// tcp/unbound_buffer.h, which include this header, but not the header itself, and Debian's
// mirror has no source of that release to take it from. libomni includes tcp/pair.h only for
// the guard of the ranks' pairs (comm/gloo_guard.h). Written for slurm-omni from what those
// headers use: three wrappers through which Gloo's device thread reaches an UnboundBuffer
// that its owner may destroy at any moment. Their data members (one std::shared_ptr or
// std::weak_ptr each) give tcp::Pair the layout the packaged library was compiled with, and
// their inline members must behave as the library's own: the owner's wrapper, when destroyed,
// waits until no other thread holds the buffer any more. Searched after the system's headers
// (-idirafter, launcher/Makefile.am): a Gloo that installs its own wins.
#pragma once

#include <memory>
#include <thread>

namespace gloo {

template <typename T>
class WeakNonOwningPtr;
template <typename T>
class ShareableNonOwningPtr;

// A hold, for the length of one use, on an object owned elsewhere: empty when it is gone.
template <typename T>
class NonOwningPtr final {
public:
    NonOwningPtr() = default;
    explicit NonOwningPtr(const WeakNonOwningPtr<T> &weak) : held_(weak.target_.lock()) {}

    T *operator->() const noexcept { return held_.get(); }
    explicit operator bool() const noexcept { return held_ != nullptr; }

private:
    std::shared_ptr<T> held_;
};

// A reference that keeps nothing alive. True once it was made from an owner, even after the
// object is gone (Gloo tells "never set" from "set"; lock() through NonOwningPtr tells alive).
template <typename T>
class WeakNonOwningPtr final {
public:
    WeakNonOwningPtr() = default;
    explicit WeakNonOwningPtr(const ShareableNonOwningPtr<T> &owner) : target_(owner.self_) {}

    explicit operator bool() const noexcept {
        const std::weak_ptr<T> unbound;
        const bool same_owner = !target_.owner_before(unbound) && !unbound.owner_before(target_);
        return !same_owner;
    }

private:
    std::weak_ptr<T> target_;
    friend class NonOwningPtr<T>;
};

// Held by the object's owner (the buffer itself): hands out WeakNonOwningPtrs, and on
// destruction blocks until every NonOwningPtr taken from them is released.
template <typename T>
class ShareableNonOwningPtr final {
public:
    explicit ShareableNonOwningPtr(T *object) : self_(object, [](T *) { /* not owned */ }) {}
    ShareableNonOwningPtr(const ShareableNonOwningPtr &) = delete;
    ShareableNonOwningPtr &operator=(const ShareableNonOwningPtr &) = delete;

    ~ShareableNonOwningPtr() {
        const std::weak_ptr<T> last(self_);
        self_.reset();
        while (!last.expired()) std::this_thread::yield();
    }

private:
    std::shared_ptr<T> self_;
    friend class WeakNonOwningPtr<T>;
};

}  // namespace gloo
