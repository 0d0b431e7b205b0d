// omni-ctl --job J (ctl/remote.h): who may ask, and the step that asks.
#include <gtest/gtest.h>

#include "ctl/remote.h"

using namespace omni::launcher;

namespace {

RemoteCall call(std::uint32_t caller) {
    RemoteCall c;
    c.job_id = 12;
    c.batch_host = "n3";
    c.job_user = "alice";
    c.job_uid = 1001;
    c.cluster = "omni17000";
    c.caller_uid = caller;
    c.self = "/usr/local/bin/omni-ctl";
    return c;
}

}  // namespace

TEST(Remote, TheOwnerRunsAStepOnTheBatchHost) {
    auto a = call(1001);
    auto argv = remote_argv(a);
    ASSERT_TRUE(argv) << argv.error();
    EXPECT_EQ(argv.value(),
              (std::vector<std::string>{"srun", "--jobid=12", "--overlap", "--nodes=1", "--ntasks=1",
                                        "--nodelist=n3", "--job-name=omni-ctl", "--quiet",
                                        "/usr/local/bin/omni-ctl", "--print-coordinator", "--job-dir",
                                        "/tmp/omni-1001/job-omni17000-12"}));
    a.cluster.clear();  // a cluster without a name: the job directory has none either
    EXPECT_EQ(remote_argv(a).value().back(), "/tmp/omni-1001/job-12");
}

TEST(Remote, RootActsAsTheOwner) {
    auto argv = remote_argv(call(0));
    ASSERT_TRUE(argv) << argv.error();
    ASSERT_GE(argv.value().size(), 5u);
    EXPECT_EQ(std::vector<std::string>(argv.value().begin(), argv.value().begin() + 5),
              (std::vector<std::string>{"runuser", "-u", "alice", "--", "srun"}));
}

TEST(Remote, AnyoneElseIsRefused) {
    auto argv = remote_argv(call(1002));
    ASSERT_FALSE(argv);
    EXPECT_EQ(argv.error(), "job 12 belongs to alice (uid 1001): only its owner and root may ask its coordinator");
}

TEST(Remote, PrintedCoordinator) {
    auto p = parse_printed_coordinator("tcp://10.0.0.1:4000\nabc123\n");
    ASSERT_TRUE(p) << p.error();
    EXPECT_EQ(p.value().first, "tcp://10.0.0.1:4000");
    EXPECT_EQ(p.value().second, "abc123");
    for (const char *bad : {"", "tcp://10.0.0.1:4000\n", "tcp://10.0.0.1:4000\nabc", "a\nb\nc\n", "\n\n"})
        EXPECT_FALSE(parse_printed_coordinator(bad)) << bad;
}
