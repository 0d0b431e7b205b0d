// Encoder work in the LLM pipeline (MegaScale-Omni's encoder-LLM multiplexing with uniform
// insertion): the encoders run on the pipeline's own GPUs, their micro-batches spread over
// the stages' idle time, instead of on a pipeline stage or GPUs of their own. Pure: costs in,
// a schedule out.
//
// Why it is shaped like this:
//  - A 1F1B pipeline of S stages and M micro-batches idles at its start and end (stage s
//    waits s forward times for its first micro-batch). Encoder micro-batches have no
//    dependency but their consumer: encoder forward j before the LLM's forward of
//    micro-batch j on stage 0, encoder backward j after the LLM's backward j on stage 0. So
//    they can fill those idle times on any stage; an encoder stage instead adds a stage (and
//    its GPUs) whose time is not the LLM stages' time, and putting them all in front of stage
//    0 delays every micro-batch.
//  - The planner decides only the order of each stage's work; the times come from one
//    simulation of that order with every dependency (a list schedule), so a plan can be
//    slow but never wrong, and every layout (front, encoder stage, uniform) is timed by the
//    same rules.
//  - Uniform insertion: encoder micro-batches in the order their consumers need them, each
//    on the stage with the least encoder work so far that has an idle gap (in the pipeline
//    without encoders) long enough before its deadline; the rest in rounds of S, one per
//    stage at one time slot, so that their delays overlap instead of adding up (in 1F1B's
//    steady state a delay on one stage reaches all).
#ifndef OMNI_LAUNCHER_BALANCE_INSERTION_H
#define OMNI_LAUNCHER_BALANCE_INSERTION_H

#include <cstdint>
#include <string>
#include <vector>

#include "omni/result.h"

namespace omni::balance {

constexpr std::uint32_t kMaxStages = 1024;
constexpr std::uint32_t kMaxMicroBatches = 16384;

struct PipelineSpec {
    std::uint32_t stages = 1, micro_batches = 1;
    std::vector<double> forward, backward;  // per stage: one micro-batch's LLM times
    double transfer = 0;                    // sending one micro-batch's activations between GPUs
    // Per micro-batch, a factor on its LLM times (micro-batches of whole samples are not all
    // alike); empty: 1 for every micro-batch.
    std::vector<double> weight;
    double llm_time(bool backward_pass, std::uint32_t stage, std::uint32_t micro) const {
        return (backward_pass ? backward : forward)[stage] * (weight.empty() ? 1.0 : weight[micro]);
    }
};

// Per LLM micro-batch j: its encoders' forward and backward times (backward 0: frozen).
struct EncoderWork {
    std::vector<double> forward, backward;
};

enum class OpKind { Forward, Backward, EncoderForward, EncoderBackward };
const char *op_name(OpKind k);

struct Op {
    OpKind kind = OpKind::Forward;
    std::uint32_t micro = 0;
    double start = 0, end = 0;
};

struct Schedule {
    std::uint32_t gpus = 0;               // stages that hold GPUs (an encoder stage counts)
    std::vector<std::vector<Op>> stages;  // per stage, in execution order
    double makespan = 0;
    double busy = 0;  // summed over the stages
    double bubble() const { return makespan > 0 ? 1 - busy / (gpus * makespan) : 0; }
    // {"gpus":..,"makespan":..,"bubble":..,"stages":[[{"op":"F","micro":0,"start":..,"end":..},..],..]}
    std::string to_json() const;
};

enum class Insertion {
    None,          // the LLM alone (the reference: its own bubble)
    Front,         // every encoder forward on stage 0 before its first LLM work
    FirstStage,    // the encoders part of stage 0: EF(j) right before F(0, j), EB(j) right
                   // after B(0, j) (Megatron-LM's place for a vision encoder)
    EncoderStage,  // an extra pipeline stage in front that runs only the encoders
    Uniform        // encoder micro-batches spread over the stages' idle time
};
const char *insertion_name(Insertion i);
// none, front, first-stage, encoder-stage, uniform
Result<Insertion> parse_insertion(const std::string &text);

// The schedule of `pipe` with `enc` placed as `how` says. Errors: 0 or too many stages or
// micro-batches, per-stage times not of the stages' count, encoder times not of the
// micro-batches' count, a time negative or not finite (the message names it).
Result<Schedule> schedule(const PipelineSpec &pipe, const EncoderWork &enc, Insertion how);

// Whether `s` keeps the rules (tests, and omni-sim's own check): every LLM op and every
// encoder op of `pipe`/`enc` exactly once, none overlapping on its stage, and each after its
// dependencies (plus the transfer between stages). An error names the first broken rule.
Status check_schedule(const Schedule &s, const PipelineSpec &pipe, const EncoderWork &enc, Insertion how);

// Peak activation memory per GPU of `s` (index as s.stages): micro-batch j's LLM activations,
// llm[j] per LLM stage, held on each stage from its forward's start to its backward's end; its
// encoder activations enc[j] on the GPU of its encoder forward from that forward's start to
// its encoder backward's end (frozen encoders, no backward: to the forward's end). Sizes
// must be the micro-batches' count (checked: an error names it).
Result<std::vector<double>> peak_memory(const Schedule &s, const std::vector<double> &llm,
                                        const std::vector<double> &enc);

}  // namespace omni::balance

#endif
