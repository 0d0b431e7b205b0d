// The job secret of this test process: made fresh by generate_secret() at first use, so two
// copies of a test that run at once (by hand, or two build trees on one machine) refuse each
// other's clients, should the kernel give one's coordinator the port that the other's just left.
#ifndef OMNI_LAUNCHER_TEST_SECRET_H
#define OMNI_LAUNCHER_TEST_SECRET_H

#include <cstdio>
#include <cstdlib>
#include <string>

#include "coord/secret.h"

inline const std::string &test_secret() {
    static const std::string secret = [] {
        auto s = omni::launcher::generate_secret();
        if (!s) {
            std::fprintf(stderr, "test_secret: %s\n", s.error().c_str());
            std::abort();
        }
        return s.value();
    }();
    return secret;
}

#endif
