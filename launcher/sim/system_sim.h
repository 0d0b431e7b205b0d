// omni-sim's whole-system model: MegaScale-Omni's techniques together (grouped reordering,
// LSSP, encoder-LLM multiplexing with uniform insertion) against static systems, step by
// step, at a scale of data-parallel pipelines. Pure: a workload in, per-step times and
// memory out.
//
// Why it is shaped like this:
//  - A step waits for its slowest data-parallel replica, and a replica here is a 1F1B
//    pipeline whose time depends on which samples it got, how they form micro-batches and
//    where its encoder work runs. So the model composes the planners that exist: the
//    assignment of samples to replicas (balance/balance.h, balance/lssp.h), micro-batches of
//    whole samples or shards, and one pipeline schedule per replica (balance/insertion.h),
//    whose makespan is that replica's step time. No technique gets a formula of its own:
//    what the real planners do is what is timed.
//  - The systems differ only in those three choices (System below); everything else (the
//    ledger's samples, the cost model, the memory limit) is the same, so a ratio between two
//    systems is the effect of their choices.
//  - Memory is the schedule's own: activations held from a forward's start to its
//    backward's end (insertion.h's peak_memory), in token-equivalents of one whole LLM's
//    activations, so the first stage's memory under each layout is comparable.
#ifndef OMNI_LAUNCHER_SIM_SYSTEM_SIM_H
#define OMNI_LAUNCHER_SIM_SYSTEM_SIM_H

#include <cstdint>
#include <string>
#include <vector>

#include "balance/insertion.h"
#include "balance/lssp.h"
#include "omni/result.h"
#include "workload/workload.h"

namespace omni::sim {

enum class System {
    StaticFirst,  // ledger order, encoders part of pipeline stage 0 (Megatron-LM)
    StaticStage,  // ledger order, encoders on a stage of E GPUs of their own (best E)
    Multiplex,    // ledger order, encoders uniformly inserted into the LLM's stages
    Reorder,      // Karmarkar-Karp over the replicas and the micro-batches, multiplexed
    Omni          // LSSP (long samples split, the rest balanced), multiplexed: MegaScale-Omni
};
const char *system_name(System s);
// static-first, static-stage, multiplex, reorder, omni; else an error naming the text.
Result<System> parse_system(const std::string &text);
bool is_static(System s);

struct SystemConfig {
    std::uint32_t gpus = 64;         // of the LLM's pipelines: replicas = gpus / stages
    std::uint32_t stages = 8;        // pipeline stages of one replica (one GPU each)
    std::uint32_t per_replica = 32;  // samples per replica per step
    std::uint32_t micro_batches = 16;
    std::uint64_t seed = 1, first_step = 0;
    std::uint32_t steps = 20;
    // The memory limit, the sequence-parallel degrees and the time of a sample's LLM work
    // (lssp.h): the same for every system. A static system whose step holds a sample above
    // the limit splits every sample of that step over one degree (plan_static_sp).
    balance::LsspOptions lssp;
    bool frozen_encoders = false;
    double transfer = 0.01;  // between stages, a share of a mean micro-batch's stage forward
};

constexpr std::uint32_t kMaxSystemSteps = 10000;

struct SystemResult {
    System system = System::Omni;
    std::uint32_t encoder_gpus = 0;       // per replica (StaticStage's best E; 0 for the others)
    std::uint64_t gpus = 0;               // in all: replicas * (stages + encoder_gpus)
    double step_time = 0;                 // mean over the steps: the slowest replica's makespan
    double imbalance = 0;                 // mean over the steps of slowest / mean replica makespan
    double bubble = 0;                    // mean over replicas and steps: the idle share of the GPUs
    std::vector<double> peak_memory;      // per GPU of a replica (encoder stage first), the most
                                          // over replicas and steps
    double first_stage_memory = 0;        // peak_memory of the LLM's first stage
    std::uint32_t split_steps = 0;        // steps that split samples (sequence parallel)
    std::uint32_t over_memory_steps = 0;  // steps with a sample above the limit at every degree
    double samples_per_step = 0;
    // Samples per unit of time per GPU: the throughput every system is compared by.
    double throughput() const { return step_time > 0 ? samples_per_step / step_time / static_cast<double>(gpus) : 0; }
};

// `system` over config.steps steps of `w` from config.first_step. StaticStage tries E = 1..
// stages encoder GPUs per replica and keeps the E with the most throughput. Errors: stages
// or micro-batches 0 or above insertion's bounds, gpus not a multiple of stages, replicas
// not a multiple of lssp.max_degree, per_replica below micro_batches, too many samples a
// step (balance::kMaxSamples), steps 0 or above kMaxSystemSteps; a planner's error (named).
Result<SystemResult> simulate_system(const SystemConfig &config, const workload::Workload &w, System system);

// The idle share of every GPU's time in `s` when its encoder stage (stage 0, with
// `encoder_gpus` > 0) is run by that many GPUs, each op an E-th as long (data parallel): E
// GPUs are busy while its one modelled timeline is.
double gpu_bubble(const balance::Schedule &s, std::uint32_t encoder_gpus);

}  // namespace omni::sim

#endif
