// Reading jobs as Slurm 22.05.8's scontrol shows them (slurmjob/job.h). The text below is
// what `scontrol show job -d 2` printed on the local cluster for
//   sbatch -N 3 -n 4 -J 'my job NodeList=x' (2 CPUs per node)
// and the expected answers are read off it by hand.
#include <algorithm>

#include <gtest/gtest.h>

#include "slurmjob/job.h"

using namespace omni::launcher;

namespace {

const char *kJob2 = R"(JobId=2 JobName=my job NodeList=x
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   Priority=4294901758 Nice=0 Account=root QOS=normal
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   DerivedExitCode=0:0
   RunTime=00:00:02 TimeLimit=UNLIMITED TimeMin=N/A
   SubmitTime=2026-12-03T18:19:22 EligibleTime=2026-12-03T18:19:22
   AccrueTime=2026-12-03T18:19:22
   StartTime=2026-12-03T18:19:22 EndTime=Unknown Deadline=N/A
   SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-12-03T18:19:22 Scheduler=Main
   Partition=omni AllocNode:Sid=localhost:26833
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=n[1-3]
   BatchHost=n1
   NumNodes=3 NumCPUs=4 NumTasks=4 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=4,node=3,billing=4
   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*
   JOB_GRES=(null)
     Nodes=n1 CPU_IDs=0-1 Mem=0 GRES=
     Nodes=n[2-3] CPU_IDs=0 Mem=0 GRES=
   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0
   Features=(null) DelayBoot=00:00:00
   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)
   Command=/tmp/j.sh
   WorkDir=/tmp
   StdErr=/tmp/slurm-2.out
   StdIn=/dev/null
   StdOut=/tmp/slurm-2.out
   Power=
   
)";

// `scontrol show job -d 3` three seconds after a job of the omni partition (higher
// PriorityTier) asked for its nodes, on the local cluster (4 nodes x 2 fake GPUs), for
//   sbatch -p scavenger -N2 --exclusive --gres=gpu:2 -J 'sat PreemptTime=x' --wrap 'sleep 120'
const char *kJob3Preempted = R"(JobId=3 JobName=sat PreemptTime=x
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   Priority=4294901757 Nice=0 Account=root QOS=normal
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   DerivedExitCode=0:0
   RunTime=00:00:03 TimeLimit=UNLIMITED TimeMin=N/A
   SubmitTime=2026-12-04T09:41:49 EligibleTime=2026-12-04T09:41:49
   AccrueTime=2026-12-04T09:41:49
   StartTime=2026-12-04T09:41:50 EndTime=Unknown Deadline=N/A
   PreemptEligibleTime=2026-12-04T09:41:50 PreemptTime=2026-12-04T09:41:53
   SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-12-04T09:41:50 Scheduler=Main
   Partition=scavenger AllocNode:Sid=localhost:1306
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=n[1-2]
   BatchHost=n1
   NumNodes=2 NumCPUs=4 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=4,node=2,billing=4,gres/gpu=4
   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*
   JOB_GRES=gpu:h100:4
     Nodes=n[1-2] CPU_IDs=0-1 Mem=0 GRES=gpu:h100:2(IDX:0-1)
   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0
   Features=(null) DelayBoot=00:00:00
   OverSubscribe=NO Contiguous=0 Licenses=(null) Network=(null)
   Command=(null)
   WorkDir=/tmp
   StdErr=/dev/null
   StdIn=/dev/null
   StdOut=/dev/null
   Power=
   TresPerNode=gres:gpu:2
   

)";

}  // namespace

TEST(ScontrolJob, ParsesTheFieldsAtTheirLineStarts) {
    auto j = parse_scontrol_job(kJob2, 2);
    ASSERT_TRUE(j) << j.error();
    EXPECT_EQ(j.value().state, "RUNNING");
    EXPECT_EQ(j.value().user, "root");
    EXPECT_EQ(j.value().uid, 0u);
    EXPECT_EQ(j.value().batch_host, "n1");
    EXPECT_EQ(j.value().node_list, "n[1-3]");  // not the job name's "NodeList=x"
    EXPECT_EQ(j.value().nodes, (std::vector<std::string>{"n1", "n2", "n3"}));
    EXPECT_EQ(j.value().cpus, (std::vector<std::uint32_t>{2, 1, 1}));
    EXPECT_EQ(j.value().gpus, (std::vector<std::uint32_t>{0, 0, 0}));   // GRES= empty
    EXPECT_EQ(j.value().mem_mb, (std::vector<std::uint64_t>{0, 0, 0}));
    EXPECT_EQ(j.value().priority, 4294901758u);
    EXPECT_EQ(j.value().partition, "omni");
    EXPECT_EQ(j.value().tres_per_node, "");
    EXPECT_FALSE(j.value().exclusive);  // OverSubscribe=OK
    EXPECT_FALSE(j.value().preempted);  // no PreemptTime line at all
}

// What a satellite needs: the main job's partition, GRES and exclusivity; and, for the
// satellite itself, that Slurm is preempting it (the job name's "PreemptTime=x" is no field).
TEST(ScontrolJob, PartitionGresExclusiveAndPreemption) {
    auto j = parse_scontrol_job(kJob3Preempted, 3);
    ASSERT_TRUE(j) << j.error();
    EXPECT_EQ(j.value().partition, "scavenger");
    EXPECT_EQ(j.value().tres_per_node, "gres:gpu:2");
    EXPECT_TRUE(j.value().exclusive);
    EXPECT_TRUE(j.value().preempted);
    EXPECT_EQ(j.value().cpus, (std::vector<std::uint32_t>{2, 2}));
    EXPECT_EQ(j.value().gpus, (std::vector<std::uint32_t>{2, 2}));  // gpu:h100:2(IDX:0-1)
    std::string before(kJob3Preempted);
    auto at = before.find("PreemptTime=2026");
    ASSERT_NE(at, std::string::npos);
    std::string not_yet = before.substr(0, at) + "PreemptTime=None" + before.substr(before.find('\n', at));
    auto k = parse_scontrol_job(not_yet, 3);
    ASSERT_TRUE(k) << k.error();
    EXPECT_FALSE(k.value().preempted);
}

TEST(ScontrolJob, RefusesAnotherJobsOutputAndMissingFields) {
    auto j = parse_scontrol_job(kJob2, 3);
    ASSERT_FALSE(j);
    EXPECT_EQ(j.error(), "scontrol show job 3: the output is for job '2'");
    j = parse_scontrol_job("slurm_load_jobs error: Invalid job id specified\n", 2);
    ASSERT_FALSE(j);
    EXPECT_EQ(j.error(), "scontrol show job 2: no JobId line in the output");
    std::string no_nodes = kJob2;
    no_nodes.erase(no_nodes.find("   NodeList="), std::string("   NodeList=n[1-3]\n").size());
    j = parse_scontrol_job(no_nodes, 2);
    ASSERT_FALSE(j);
    EXPECT_EQ(j.error(), "scontrol show job 2: no NodeList line in the output");
    std::string bad = kJob2;
    bad.replace(bad.find("NodeList=n[1-3]"), 15, "NodeList=n[3-1]");
    j = parse_scontrol_job(bad, 2);
    ASSERT_FALSE(j);
    EXPECT_NE(j.error().find("NodeList: 'n[3-1]': a range runs backwards"), std::string::npos) << j.error();
}

// GRES of several kinds and index lists with commas; memory where Slurm tracks it.
TEST(ScontrolJob, GpusAndMemoryPerNode) {
    std::string text = kJob3Preempted;
    text.replace(text.find("     Nodes=n[1-2] CPU_IDs=0-1 Mem=0 GRES=gpu:h100:2(IDX:0-1)"),
                 std::string("     Nodes=n[1-2] CPU_IDs=0-1 Mem=0 GRES=gpu:h100:2(IDX:0-1)").size(),
                 "     Nodes=n1 CPU_IDs=0-3 Mem=2048 GRES=gpu:h100:3(IDX:0-1,3),nic:1\n"
                 "     Nodes=n2 CPU_IDs=0-1 Mem=1024 GRES=gpu:1(IDX:2)");
    auto j = parse_scontrol_job(text, 3);
    ASSERT_TRUE(j) << j.error();
    EXPECT_EQ(j.value().cpus, (std::vector<std::uint32_t>{4, 2}));
    EXPECT_EQ(j.value().gpus, (std::vector<std::uint32_t>{3, 1}));
    EXPECT_EQ(j.value().mem_mb, (std::vector<std::uint64_t>{2048, 1024}));
    text.replace(text.find("gpu:1(IDX:2)"), 12, "gpu:x(IDX:2)");
    j = parse_scontrol_job(text, 3);
    ASSERT_FALSE(j);
    EXPECT_NE(j.error().find("GRES 'gpu:x(IDX:2)'"), std::string::npos) << j.error();
}

TEST(ScontrolJob, PendingJobHasNoCpuDetails) {
    std::string pending = kJob2;
    pending.replace(pending.find("JobState=RUNNING"), 16, "JobState=PENDING");
    pending.erase(pending.find("     Nodes=n1"));  // a pending job has no per-node lines
    pending += "   NodeList=(null)\n";
    auto j = parse_scontrol_job(pending, 2);
    ASSERT_TRUE(j) << j.error();
    EXPECT_EQ(j.value().state, "PENDING");
    EXPECT_TRUE(j.value().cpus.empty());
}

TEST(ScontrolJob, CompressesCounts) {
    EXPECT_EQ(compress_counts({}), "");
    EXPECT_EQ(compress_counts({2}), "2");
    EXPECT_EQ(compress_counts({2, 2, 2, 1}), "2(x3),1");
    EXPECT_EQ(compress_counts({1, 2, 1}), "1,2,1");
}

// What scontrol's slurm_job_J_resize.sh sets after `scontrol update JobId=2 NodeList=n[1-2]`.
TEST(ScontrolJob, AllocationEnvironmentAfterAShrink) {
    auto j = parse_scontrol_job(kJob2, 2);
    ASSERT_TRUE(j);
    JobInfo job = j.value();
    job.nodes.pop_back();
    job.cpus.pop_back();
    std::vector<std::string> unset;
    auto env = allocation_environment(job, unset);
    EXPECT_EQ(env.at("SLURM_JOB_NODELIST"), "n[1-2]");
    EXPECT_EQ(env.at("SLURM_NODELIST"), "n[1-2]");
    EXPECT_EQ(env.at("SLURM_JOB_NUM_NODES"), "2");
    EXPECT_EQ(env.at("SLURM_NNODES"), "2");
    EXPECT_EQ(env.at("SLURM_JOB_CPUS_PER_NODE"), "2,1");
    EXPECT_EQ(unset, (std::vector<std::string>{"SLURM_NTASKS", "SLURM_NPROCS", "SLURM_TASKS_PER_NODE"}));
}

// After an expansion Slurm lists CPU_IDs for the first nodes only, and the job's CPUs per
// node come back unknown: the stale count of the batch step is removed, not passed on.
TEST(ScontrolJob, AllocationEnvironmentWithoutCpuDetails) {
    auto j = parse_scontrol_job(kJob2, 2);
    ASSERT_TRUE(j);
    JobInfo job = j.value();
    job.cpus.clear();
    std::vector<std::string> unset;
    auto env = allocation_environment(job, unset);
    EXPECT_EQ(env.count("SLURM_JOB_CPUS_PER_NODE"), 0u);
    EXPECT_NE(std::find(unset.begin(), unset.end(), "SLURM_JOB_CPUS_PER_NODE"), unset.end());
}

// job_submit/omni's record of a deferred shrink, as `scontrol show job` printed it on the
// local cluster after `scontrol update JobId=1 NumNodes=2` on a 4-node omni job; a job name
// or a user's Comment with the same words is no record.
TEST(ScontrolJob, DeferredShrinkRecord) {
    std::string text(kJob2);
    auto j = parse_scontrol_job(text, 2);
    ASSERT_TRUE(j) << j.error();
    EXPECT_EQ(j.value().release_request, "");
    const std::string record = "   SystemComment=omni-release=n[3-4]@1796388564 \n";
    const std::string fake = "   Comment=omni-release=n[1-9]@1 \n";
    auto at = text.find("   Power=");
    ASSERT_NE(at, std::string::npos);
    std::string with = text.substr(0, at) + fake + record + text.substr(at);
    with.replace(0, std::string("JobId=2 JobName=my job").size(), "JobId=2 JobName=SystemComment=omni-release=x");
    auto k = parse_scontrol_job(with, 2);
    ASSERT_TRUE(k) << k.error();
    EXPECT_EQ(k.value().release_request, "n[3-4]@1796388564");
    // Among other words of the comment.
    std::string among = text.substr(0, at) + "   SystemComment=site note omni-release=n4@7 more\n" + text.substr(at);
    auto m = parse_scontrol_job(among, 2);
    ASSERT_TRUE(m) << m.error();
    EXPECT_EQ(m.value().release_request, "n4@7");
}

// `scontrol show config` as 22.05.8 prints it (an excerpt of the local cluster's).
TEST(SlurmConfig, ValuesByKey) {
    const char *text =
        "Configuration data as of 2026-12-04T15:50:01\n"
        "AccountingStorageBackupHost = (null)\n"
        "ClusterName             = omni-17000\n"
        "JobSubmitPlugins        = omni\n"
        "PrologSlurmctld         = /tmp/c/prolog-record\n"
        "SchedulerParameters     = (null)\n";
    EXPECT_EQ(parse_config_value(text, "ClusterName"), std::optional<std::string>("omni-17000"));
    EXPECT_EQ(parse_config_value(text, "JobSubmitPlugins"), std::optional<std::string>("omni"));
    EXPECT_EQ(parse_config_value(text, "SchedulerParameters"), std::optional<std::string>(""));
    EXPECT_EQ(parse_config_value(text, "Cluster"), std::nullopt);
    EXPECT_EQ(parse_config_value(text, "omni"), std::nullopt);
}
