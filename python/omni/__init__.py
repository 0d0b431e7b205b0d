"""slurm-omni for Python: the elastic data-parallel runtime (libomni) and its HDF5
checkpoints (libomni-ckpt). See omni-python(3).

A rank's life, as in C:

    import omni
    omni.init()                       # joins the job (PMIx, coordinator, communicator)
    omni.register_params(params)      # a float32 numpy array the job replicates
    omni.data_configure(dataset_size, seed)
    step, rewind = omni.start()
    while True:
        for micro in range(omni.data_grad_accum()):
            batch = omni.data_micro_batch(micro)    # this rank's sample indices
            ...                                      # forward, backward
        omni.allreduce(grads, op="avg")
        step += 1
        d = omni.boundary(step)
        if d.kind in (omni.STOP, omni.LEFT):
            break
    omni.finalize()

Every failure is an exception: omni.StateError (called before init(), after the job
stopped), omni.CommError (the coordinator or a peer failed), omni.InvalidArgument (a
ValueError: an argument libomni refused), omni.CheckpointError (an OSError), TypeError and
ValueError for what a call is given (a wrong dtype, a non-contiguous buffer, a negative or
huge count). Nothing passed in crashes the interpreter.
"""

from omni._omni import (  # noqa: F401  (the public API)
    CONTINUE,
    DP,
    LEFT,
    MP,
    RESHAPED,
    REWIND,
    STOP,
    WORLD,
    CheckpointError,
    CheckpointReader,
    CheckpointWriter,
    CommError,
    Decision,
    Error,
    InvalidArgument,
    Ledger,
    StateError,
    Workload,
    abandon,
    allgather,
    allreduce,
    backend,
    barrier,
    boundary,
    broadcast,
    check_member,
    checkpoint_done,
    commit,
    data_balance,
    data_configure,
    data_grad_accum,
    data_load,
    data_micro_batch,
    data_save,
    data_step_samples,
    finalize,
    generation,
    get_state_shard,
    group_info,
    init,
    rank,
    reduce_scatter,
    register_params,
    request_stop,
    set_cuda_stream,
    set_state_shard,
    sockets_adopt,
    sockets_begin,
    sp,
    standalone,
    start,
    state_add,
    store_add,
    store_get,
    store_set,
    store_wait,
    unit,
    world_size,
)

#: The decision kinds of boundary(), by value.
KIND_NAMES = {CONTINUE: "continue", RESHAPED: "reshaped", REWIND: "rewind", STOP: "stop", LEFT: "left"}

__all__ = [name for name in dir() if not name.startswith("_")]
