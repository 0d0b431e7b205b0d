// Reading jobs as Slurm 22.05.8's scontrol shows them (slurmjob/job.h). The text below is
// what `scontrol show job -d 2` printed on the local cluster for
//   sbatch -N 3 -n 4 -J 'my job NodeList=x' (2 CPUs per node)
// and the expected answers are read off it by hand.
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
