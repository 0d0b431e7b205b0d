// The error idiom of the C APIs (omni/status.h), shared by libomni, libomni-ckpt and the hal C
// API: a status code returned, a message kept per thread, no exception crossing into C.
// Each library keeps its own thread-local message and hands it to these helpers, so that a
// library's last error stays its own whichever copies of this code a program links.
#ifndef OMNI_COMMON_C_STATUS_H
#define OMNI_COMMON_C_STATUS_H

#include <exception>
#include <new>
#include <string>
#include <utility>

#include "omni/status.h"

namespace omni::capi {

// Stores `msg` in `slot` (the library's thread-local message) and returns `code`. Never
// throws: without memory for the message the previous one stays, and the code still says
// what happened.
inline int record(std::string &slot, omni_status code, std::string msg) noexcept {
    try {
        slot = std::move(msg);
    } catch (...) {
    }
    return code;
}

// Runs an entry point's body `f` (returning int) with every exception caught and recorded in
// `slot`: std::bad_alloc as OMNI_ENOMEM, anything else as OMNI_EINTERNAL. `fn`, when not
// NULL, prefixes the message ("omni_ckpt_commit: out of memory").
template <typename F>
int guard(std::string &slot, const char *fn, F &&f) noexcept {
    const auto prefixed = [fn](const char *what) {
        return fn ? std::string(fn) + ": " + what : std::string(what);
    };
    try {
        try {
            return f();
        } catch (const std::bad_alloc &) {
            return record(slot, OMNI_ENOMEM, prefixed("out of memory"));
        } catch (const std::exception &e) {
            return record(slot, OMNI_EINTERNAL, prefixed("internal error: ") + e.what());
        } catch (...) {
            return record(slot, OMNI_EINTERNAL, prefixed("internal error"));
        }
    } catch (...) {
        return OMNI_ENOMEM;   // building the message itself failed
    }
}

}  // namespace omni::capi

#endif  // OMNI_COMMON_C_STATUS_H
