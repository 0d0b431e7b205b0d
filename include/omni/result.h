/* slurm-omni: a small status/expected type used at module boundaries.
 *
 * Modules return omni::Result<T> (a value or an error message) instead of throwing, so that
 * code called from Slurm plugins (C boundaries, sometimes running as root inside daemons)
 * never lets an exception escape. Messages name the input that was wrong and what was
 * expected, ready to be shown to a user.
 */
#ifndef OMNI_RESULT_H
#define OMNI_RESULT_H

#include <string>
#include <utility>
#include <variant>

namespace omni {

/* An error message; a distinct type so that Result<std::string> stays unambiguous. */
struct Error {
    std::string message;
};

inline Error make_error(std::string message) { return Error{std::move(message)}; }

/* Either a T or an Error. ok() tells which; value() and error() must only be called on the
 * matching side (checked with a debug assertion-free std::get, which throws
 * std::bad_variant_access on misuse: a programming error, caught by the tests). */
template <typename T>
class [[nodiscard]] Result {
public:
    Result(T value) : v_(std::move(value)) {}           // NOLINT: implicit by design
    Result(Error err) : v_(std::move(err)) {}           // NOLINT: implicit by design

    bool ok() const { return v_.index() == 0; }
    explicit operator bool() const { return ok(); }
    const T &value() const & { return std::get<0>(v_); }
    T &value() & { return std::get<0>(v_); }
    T &&value() && { return std::get<0>(std::move(v_)); }
    const std::string &error() const { return std::get<1>(v_).message; }

private:
    std::variant<T, Error> v_;
};

/* A Result without a value. */
class [[nodiscard]] Status {
public:
    Status() = default;                                  // success
    Status(Error err) : failed_(true), msg_(std::move(err.message)) {}  // NOLINT
    static Status success() { return Status(); }
    bool ok() const { return !failed_; }
    explicit operator bool() const { return ok(); }
    const std::string &error() const { return msg_; }

private:
    bool failed_ = false;
    std::string msg_;
};

}  // namespace omni

#endif
