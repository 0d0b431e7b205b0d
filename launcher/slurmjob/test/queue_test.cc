// Reading the queue and the idle nodes (slurmjob/queue.h). The texts are in the form Slurm
// 22.05.8's squeue and sinfo print for the formats queue.cc asks for.
#include <gtest/gtest.h>

#include "slurmjob/queue.h"

using namespace omni::launcher;

namespace {

TEST(PendingJobs, ReadsEveryLine) {
    auto r = parse_pending_jobs("12 4294901755 2 Resources\n13 100 1 Priority\n\n14 0 3 (null)\n");
    ASSERT_TRUE(r.ok()) << r.error();
    const auto &j = r.value();
    ASSERT_EQ(j.size(), 3u);
    EXPECT_EQ(j[0].job_id, 12u);
    EXPECT_EQ(j[0].priority, 4294901755u);
    EXPECT_EQ(j[0].nodes, 2u);
    EXPECT_EQ(j[0].reason, "Resources");
    EXPECT_EQ(j[1].reason, "Priority");
    EXPECT_EQ(j[2].reason, "(null)");
    ASSERT_TRUE(parse_pending_jobs("").ok());
    EXPECT_TRUE(parse_pending_jobs("").value().empty());
}

TEST(PendingJobs, RefusesWhatIsNotItsForm) {
    for (const char *bad : {"12 100 2\n", "12 100 2 Resources extra\n", "x 100 2 Resources\n",
                            "12 -1 2 Resources\n", "0 100 2 Resources\n", "12 100 99999999999 Resources\n"}) {
        auto r = parse_pending_jobs(bad);
        ASSERT_FALSE(r.ok()) << bad;
        EXPECT_NE(r.error().find("line 1"), std::string::npos) << r.error();
    }
    auto r = parse_pending_jobs("12 100 2 Resources\n13 1 1\n");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("line 2 '13 1 1'"), std::string::npos) << r.error();
}

TEST(NodeNames, OneNameALineOnceEach) {
    auto r = parse_node_names("n3\nn4\nn3\n");
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r.value(), (std::vector<std::string>{"n3", "n4"}));
    EXPECT_FALSE(parse_node_names("n[3-4]\n").ok());
    EXPECT_FALSE(parse_node_names("n3,n4\n").ok());
    auto bad = parse_node_names("n1\nn 2\n");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().find("line 2"), std::string::npos) << bad.error();
}

}  // namespace
