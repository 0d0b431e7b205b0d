// The reference trainer's state in a libomni-ckpt checkpoint, so that a job can stop, shrink,
// grow or lose a rank and continue exactly where it was.
//
// Layout (omni-ckpt(5) tensors): model/params fp32 [P] (written by rank 0: every rank holds the
// same parameters), optim/adam_m and optim/adam_v fp32 [P] (each rank writes its ZeRO shard:
// a checkpoint of d writers loads at any other DP size by reading other ranges), and
// trainer/ledger uint8 [n] (the ledger's JSON: dataset order, position). The LR schedule and
// the ledger's epoch and seed go into the checkpoint's metadata.
#ifndef OMNI_TRAIN_STATE_IO_H
#define OMNI_TRAIN_STATE_IO_H

#include <cstdint>
#include <string>
#include <vector>

#include "omni/result.h"
#include "train/optim.h"

namespace omni::train {

struct TrainState {
    std::uint64_t step = 0;          // optimizer steps done
    std::uint64_t generation = 0;
    std::vector<float> params;       // kParams, replicated
    AdamShard adam;                  // this rank's shard
    std::string ledger_json;         // launcher::Ledger::serialise()
    // The ledger's epoch and seed, also kept in the checkpoint's metadata (Meta::ledger) so
    // that omni-ckpt show and other readers see where the data stands.
    std::uint64_t data_epoch = 0, data_seed = 0;
    LrSchedule lr;
};

// This rank's shard of checkpoint `state.step` under `root`. Rank 0 also writes the
// replicated tensors. Every rank must finish before `commit_state` is called (by one rank).
Status save_shard(const std::string &root, const TrainState &state, int rank, int world);
// Commits the checkpoint of step `state.step` written by `world` ranks; returns its path.
Result<std::string> commit_state(const std::string &root, const TrainState &state, int world);

// The newest complete checkpoint under `root`, read for `rank` of `world` (any world: the
// optimizer shard is read for this rank's range). Returns false (no error) when `root` holds
// no complete checkpoint.
Result<bool> load_latest(const std::string &root, int rank, int world, TrainState &state);

}  // namespace omni::train

#endif
