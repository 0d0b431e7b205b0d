// The reference trainer's state in a libomni-ckpt checkpoint, so that a job can stop, shrink,
// grow or lose a rank and continue exactly where it was.
//
// Layout (omni-ckpt(5) tensors): one logical tensor per parameter of the model, whatever the
// data- and model-parallel layout that wrote it (model.h, model_tensors()): model/W1,
// model/b1, model/W2, model/b2 fp32 (each MP slice written by its DP rank 0; the replicated b2
// by MP rank 0), optim/adam_m/NAME and optim/adam_v/NAME fp32 likewise (each rank writes its
// ZeRO-1 shard of its slice, cut at the tensors' borders), and trainer/ledger uint8 [n] (the
// ledger's JSON: dataset order, position; written by rank 0). So a checkpoint loads at any
// DP size and any MP size that splits the model, by reading other ranges. The LR schedule
// and the ledger's epoch and seed go into the checkpoint's metadata.
#ifndef OMNI_TRAIN_STATE_IO_H
#define OMNI_TRAIN_STATE_IO_H

#include <cstdint>
#include <string>
#include <vector>

#include "omni/result.h"
#include "train/model.h"
#include "train/optim.h"

namespace omni::train {

struct TrainState {
    std::uint64_t step = 0;          // optimizer steps done
    std::uint64_t generation = 0;
    std::vector<float> params;       // this MP slice's (Slice::params()), replicated over DP
    AdamShard adam;                  // this rank's ZeRO-1 shard of the slice's moments
    std::string ledger_json;         // launcher::Ledger::serialise()
    // The ledger's epoch and seed, also kept in the checkpoint's metadata (Meta::ledger) so
    // that omni-ckpt show and other readers see where the data stands.
    std::uint64_t data_epoch = 0, data_seed = 0;
    LrSchedule lr;
};

// Where a rank stands: its writer number in the checkpoint (its rank in the generation), its
// model-parallel slice and its data-parallel rank of dp_size.
struct StateRank {
    int writer = 0;
    Slice slice;
    int dp_rank = 0, dp_size = 1;
};

// This rank's part of checkpoint `state.step` under `root`. Every rank must finish before
// `commit_state` is called (by one rank).
Status save_shard(const std::string &root, const TrainState &state, const StateRank &at);
// Commits the checkpoint of step `state.step` written by `world` ranks; returns its path.
Result<std::string> commit_state(const std::string &root, const TrainState &state, int world);
// Removes the files of the checkpoint of s.step that will not be committed (a shard failed).
Status abandon_state(const std::string &root, const TrainState &s);

// The newest complete checkpoint under `root`, read for the rank `at` (any DP size and any MP
// size: the slice's parameters and the rank's shard of its moments are read as ranges of the
// logical tensors). A tensor missing or of another length is an error naming it. Returns
// false (no error) when `root` holds no complete checkpoint.
Result<bool> load_latest(const std::string &root, const StateRank &at, TrainState &state);

}  // namespace omni::train

#endif
