// libomni's C API (omni/omni.h), linked against the installed-shape libomni.so: only the
// exported omni_* symbols are used here.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "omni/omni.h"

TEST(CApi, CreateRejectsNonIntegralGradAccum) {
    omni_ledger *l = reinterpret_cast<omni_ledger *>(0x1);
    EXPECT_EQ(omni_ledger_create(1000, 48, 2, 1, 5, &l), OMNI_EINVAL);  // 48 % 10
    EXPECT_EQ(l, nullptr);
    std::string msg = omni_last_error();
    EXPECT_NE(msg.find("48"), std::string::npos) << msg;
    EXPECT_NE(msg.find("10"), std::string::npos) << msg;
    EXPECT_EQ(omni_ledger_create(1000, 48, 2, 1, 4, nullptr), OMNI_EINVAL);
}

TEST(CApi, MicroBatchesCoverTheStepAndSurviveSaveLoad) {
    omni_ledger *l = nullptr;
    ASSERT_EQ(omni_ledger_create(1000, 48, 2, 3, 4, &l), OMNI_OK) << omni_last_error();
    uint32_t ga = 0;
    ASSERT_EQ(omni_ledger_grad_accum(l, &ga), OMNI_OK);
    EXPECT_EQ(ga, 6u);  // 48 / (2*4)

    uint64_t buf[2];
    size_t count = 0;
    EXPECT_EQ(omni_ledger_micro_batch(l, 0, 0, buf, 1, &count), OMNI_ERANGE);
    EXPECT_EQ(count, 2u);
    EXPECT_EQ(omni_ledger_micro_batch(l, 4, 0, buf, 2, &count), OMNI_EINVAL);  // rank 4 of 4
    EXPECT_EQ(omni_ledger_micro_batch(l, 0, 6, buf, 2, &count), OMNI_EINVAL);  // micro 6 of 6

    // One step: 4 ranks x 6 micro-steps x 2 = 48 distinct indices below 1000.
    std::set<uint64_t> step;
    for (uint32_t r = 0; r < 4; ++r)
        for (uint32_t m = 0; m < ga; ++m) {
            ASSERT_EQ(omni_ledger_micro_batch(l, r, m, buf, 2, &count), OMNI_OK);
            for (size_t i = 0; i < count; ++i) {
                EXPECT_LT(buf[i], 1000u);
                step.insert(buf[i]);
            }
        }
    EXPECT_EQ(step.size(), 48u);

    for (int i = 0; i < 25; ++i) ASSERT_EQ(omni_ledger_commit_step(l), OMNI_OK);
    EXPECT_EQ(omni_ledger_resize(l, 5), OMNI_EINVAL);  // 48 % 10
    ASSERT_EQ(omni_ledger_resize(l, 8), OMNI_OK);
    uint64_t s = 0, e = 0, c = 0;
    ASSERT_EQ(omni_ledger_position(l, &s, &e, &c), OMNI_OK);
    EXPECT_EQ(s, 25u);
    EXPECT_EQ(e, 1u);    // 25 * 48 = 1200 = one epoch + 200
    EXPECT_EQ(c, 200u);

    size_t need = 0;
    EXPECT_EQ(omni_ledger_save(l, nullptr, 0, &need), OMNI_ERANGE);
    ASSERT_GT(need, 10u);
    std::vector<char> text(need);
    ASSERT_EQ(omni_ledger_save(l, text.data(), text.size(), &need), OMNI_OK);
    EXPECT_EQ(text.back(), '\0');
    omni_ledger *back = nullptr;
    ASSERT_EQ(omni_ledger_load(text.data(), need - 1, &back), OMNI_OK) << omni_last_error();
    uint64_t a[2], b[2];
    for (uint32_t r = 0; r < 8; ++r)
        for (uint32_t m = 0; m < 3; ++m) {  // GA = 48 / (2*8) = 3
            ASSERT_EQ(omni_ledger_micro_batch(l, r, m, a, 2, &count), OMNI_OK);
            ASSERT_EQ(omni_ledger_micro_batch(back, r, m, b, 2, &count), OMNI_OK);
            EXPECT_TRUE(std::equal(a, a + 2, b));
        }
    omni_ledger_destroy(back);
    omni_ledger_destroy(l);
    omni_ledger_destroy(nullptr);

    omni_ledger *bad = nullptr;
    EXPECT_EQ(omni_ledger_load("{\"format\":\"x\"}", 14, &bad), OMNI_EFORMAT);
    EXPECT_EQ(bad, nullptr);
    EXPECT_NE(std::string(omni_last_error()).find("format"), std::string::npos);
}
