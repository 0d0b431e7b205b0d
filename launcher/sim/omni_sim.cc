// omni-sim: MegaScale-Omni's balancing policies on synthetic multimodal workloads, without
// GPUs, with the runtime's own ledger and planner (sim/dp_sim.h). Commands, one file each
// (sim/cmd_*.cc, sharing sim/cli.h):
//   balance    the policies side by side at several scales (a table, CSV);
//   lssp       long/short sequence parallelism against whole samples and a static degree;
//   insertion  encoder work in the LLM's pipeline, layout by layout;
//   system     the techniques together against static systems (sim/system_sim.h), the
//              paper's numbers beside;
//   predict    a real run's steps (omni-train-demo --metrics) as the model predicts them, and
//              the run's measured step times beside them;
//   workload   a workload as JSON (the generator: presets to edit), or its statistics.
#include <exception>
#include <iostream>
#include <string>

#include "sim/cli.h"

using namespace omni::sim::cli;

namespace {

const char *kUsage =
    "Usage: omni-sim COMMAND [OPTIONS]\n\n"
    "MegaScale-Omni's balancing of multimodal samples over data-parallel replicas, simulated\n"
    "with libomni's own ledger and planner on a synthetic workload (omni-workload(5)).\n\n"
    "Commands:\n"
    "  balance    the policies side by side at several scales: the slowest replica's cost per\n"
    "             step, imbalance, step time and throughput against none\n"
    "  predict    a real run (omni-train-demo --metrics FILE): every step's slowest replica as\n"
    "             the model predicts it, checked against the run's own \"cost\", and the\n"
    "             predicted step times beside the measured ones\n"
    "  lssp       long/short sequence parallelism against whole samples and a static\n"
    "             sequence-parallel degree: the step's makespan under a memory limit\n"
    "  insertion  encoder work in the LLM's 1F1B pipeline: in front of stage 0, on a stage of\n"
    "             its own, or spread over the stages' idle time (uniform insertion)\n"
    "  system     the techniques together against static systems at several scales: step\n"
    "             time, imbalance, bubble, memory per stage and throughput, the paper's beside\n"
    "  workload   a workload as JSON (--workload PRESET writes a file to edit), or --stats\n\n"
    "'omni-sim COMMAND --help' lists a command's options. Exit status: 0 done, 1 failed,\n"
    "2 bad usage.\n";

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2) {
        std::cerr << kUsage;
        return 2;
    }
    const std::string cmd = argv[1];
    if (cmd == "-h" || cmd == "--help") {
        std::cout << kUsage;
        return 0;
    }
    try {
        if (cmd == "balance") return cmd_balance(argc - 1, argv + 1);
        if (cmd == "predict") return cmd_predict(argc - 1, argv + 1);
        if (cmd == "workload") return cmd_workload(argc - 1, argv + 1);
        if (cmd == "lssp") return cmd_lssp(argc - 1, argv + 1);
        if (cmd == "insertion") return cmd_insertion(argc - 1, argv + 1);
        if (cmd == "system") return cmd_system(argc - 1, argv + 1);
    } catch (const std::exception &e) {
        return fail(std::string("internal error: ") + e.what());
    }
    return usage_error("unknown command '" + cmd.substr(0, 32) +
                       "'; expected balance, lssp, insertion, system, predict or workload");
}
