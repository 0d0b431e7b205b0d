// Paths of the topology fixtures (tests/fixtures/topologies) and a loader for the tests.
#ifndef OMNI_HAL_TEST_FIXTURES_H
#define OMNI_HAL_TEST_FIXTURES_H

#include <gtest/gtest.h>

#include <string>

#include "hal/model.h"

namespace omni::hal::test {

inline std::string fixture(const std::string &name) { return std::string(OMNI_FIXTURES) + "/" + name; }

inline const char *kDgx2 = "nvidiaDGX2.xml";
inline const char *kPower8 = "power8gpudistances.xml";
inline const char *kXeonIb = "32em64t-2n8c2t-pci-normalio.xml";
inline const char *kManyVfs = "16intel64-manyVFs.xml";
inline const char *kUnbalanced = "synthetic-unbalanced.xml";
inline const char *kOrphanGpu = "synthetic-gpu-no-pci-parent.xml";
inline const char *kNoIo = "synthetic-no-io.xml";

inline Node load_fixture(const std::string &name) {
    LoadOptions o;
    o.topology_file = fixture(name);
    auto r = load_node(o);
    if (!r) ADD_FAILURE() << r.error();
    return r ? std::move(r).value() : Node{};
}

}  // namespace omni::hal::test

#endif
