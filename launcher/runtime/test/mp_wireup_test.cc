// BroadcastStore (runtime/mp_wireup.h), the store an MP group's NCCL communicator gets its
// unique id through: among Gloo ranks (threads on 127.0.0.1), rank 0's value reaches every
// other rank byte for byte, an oversized value is refused on every rank naming the key (none
// is left waiting), and a set on another rank is refused. pmix_exchange needs a PMIx server
// and runs under srun in integration/train-mp.sh.
#include <gtest/gtest.h>
#include <gloo/common/error.h>

#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/test/gloo_ranks.h"
#include "runtime/mp_wireup.h"

using namespace omni::launcher;
using omni::launcher::test::on_gloo_ranks;

namespace {

// A value no rank could produce by accident: every byte value, in a rank-0-only order.
std::vector<char> pattern(std::size_t n) {
    std::vector<char> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 37 + 11) & 0xff);
    return v;
}

}  // namespace

TEST(BroadcastStore, RankZerosValueReachesEveryRank) {
    // 128 bytes: the size of an NCCL unique id; 4093: not a whole number of 4-byte words.
    for (std::size_t n : {std::size_t(128), std::size_t(4093), std::size_t(0)}) {
        on_gloo_ranks(3, [&](Communicator &c) {
            BroadcastStore store(c, 4096);
            if (c.rank() == 0) {
                store.set("mp-nccl-unique-id", pattern(n));
            } else {
                EXPECT_EQ(store.get("mp-nccl-unique-id"), pattern(n)) << "rank " << c.rank() << ", " << n << " bytes";
            }
        });
    }
}

TEST(BroadcastStore, AValueOverTheLimitIsRefusedOnEveryRank) {
    on_gloo_ranks(3, [&](Communicator &c) {
        BroadcastStore store(c, 64);
        std::string what;
        try {
            if (c.rank() == 0)
                store.set("big", pattern(65));
            else
                store.get("big");
        } catch (const gloo::IoException &e) {
            what = e.what();
        }
        EXPECT_NE(what.find("'big'"), std::string::npos) << "rank " << c.rank() << ": " << what;
        EXPECT_NE(what.find("65 bytes, more than the 64 allowed"), std::string::npos) << what;
    });
}

TEST(BroadcastStore, OnlyRankZeroSets) {
    on_gloo_ranks(2, [&](Communicator &c) {
        if (c.rank() != 1) return;
        BroadcastStore store(c, 4096);
        std::string what;
        try {
            store.set("k", pattern(8));
        } catch (const gloo::IoException &e) {
            what = e.what();
        }
        EXPECT_NE(what.find("only rank 0 sets ('k')"), std::string::npos) << what;
    });
}
