// Test helper shared by coord_serve and runtime_coord_serve: a coordinator on 127.0.0.1 with
// a fresh job secret, its files published in DIR the way omni-launch does (DIR/secret,
// DIR/coordinator), so that omni-ctl and ranks find it.
#ifndef OMNI_LAUNCHER_TEST_SERVED_COORDINATOR_H
#define OMNI_LAUNCHER_TEST_SERVED_COORDINATOR_H

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "coord/coordinator.h"
#include "coord/secret.h"

namespace omni::launcher::test {

struct ServedCoordinator {
    std::unique_ptr<Coordinator> coordinator;
    std::string secret, endpoint;
};

// Errors go to stderr prefixed with `prog`; nullopt then.
inline std::optional<ServedCoordinator> serve_coordinator(const char *prog, const std::string &dir,
                                                          const ProtocolConfig &protocol) {
    auto secret = generate_secret();
    if (!secret) {
        std::fprintf(stderr, "%s: %s\n", prog, secret.error().c_str());
        return std::nullopt;
    }
    CoordinatorConfig cfg;
    cfg.bind = {"tcp://127.0.0.1:0"};
    cfg.secret = secret.value();
    cfg.protocol = protocol;
    auto coord = Coordinator::start(cfg);
    if (!coord) {
        std::fprintf(stderr, "%s: %s\n", prog, coord.error().c_str());
        return std::nullopt;
    }
    ServedCoordinator s{std::move(coord).value(), secret.value(), ""};
    s.endpoint = s.coordinator->endpoints().front();
    if (auto st = publish_job_files(dir, s.secret, s.endpoint); !st) {
        std::fprintf(stderr, "%s: %s\n", prog, st.error().c_str());
        return std::nullopt;
    }
    return s;
}

}  // namespace omni::launcher::test

#endif
