"""Real distributed training with cutoffs: a parameter server on torch.distributed.

Rank 0 is the server, ranks 1..n the workers. One iteration t, through the same server loop
as the virtual trainer (``bdsgd.cluster.server.Server.step``: the policy chooses c_t, the iteration
runs, the policy observes):

    server   sends (t, theta_t) to every idle live worker, starts the clock
    worker   computes the gradient of its mini-batch (its shard, as in the virtual trainer), plus
             any injected delay, and sends (t, compute_s, loss, gradient)
    server   accepts gradients tagged t from distinct workers until it holds c_t of them (fewer
             when fewer workers are alive), applies their mean (SGD with momentum, the learning
             rate scaled by c_t / n as train.lr_scaling says), and records the iteration

What the established systems teach, and what is done here:

- TensorFlow's SyncReplicasOptimizer tags every gradient with its step and drops stale ones;
  PyTorch's RPC parameter-server example tags nothing and lets late gradients leak into the next
  round. Here every message carries its iteration: a gradient of an earlier iteration is never
  applied (``ps.Round``), and c counts distinct workers of the current iteration.
- Late workers (``distributed.late``): ``abandon``: the next iteration's parameters reach every
  worker still busy, which drops its work when it notices them (between its gradient and its
  injected delay: a backward pass is not interrupted); ``finish``: busy workers are left to
  finish, their gradient is discarded as stale, and only then do they get the newest
  parameters. The policy and the trace see each worker's run-time from its own parameters'
  send, as the virtual clock's server does (a late start is not the worker's slowness; the
  cutoff still waits for arrivals, and the virtual clock adds a late start back when it replays
  the trace). Either way the server records every run-time it learns in the trace schema: a
  worker that made the cutoff is observed; one that did not is censored at the cutoff time tau_t
  unless, under ``finish``, its stale gradient arrives later, which turns the censored value into
  an observed one. A ``finish`` trace is therefore less censored: the run-time model trained on
  it sees the slow tail itself instead of only a lower bound (the censored likelihood handles
  either; fewer censored values mean tighter estimates of exactly the workers that were cut).
- torchft tells dead from slow by heartbeats and normalises by the real number of contributors.
  Here each worker bumps a counter in a TCPStore beside the process group; a worker whose
  counter stops for ``--heartbeat-s`` seconds, or whose connection breaks (SIGKILL closes its
  sockets), is dead: censored from then on, and training goes on with the others. The mean is
  over the gradients actually accepted.
- The policy's decision time (choose + observe) is measured by ``Server.step`` and is part of the
  wall time here, as it would be on any real server.

Devices (``train.device``): each rank computes on its own GPU where the node has one per rank,
and ranks share the node's GPUs round robin where it has fewer (``bdsgd.devices.select_device``). Messages
always travel over gloo between host buffers: the worker copies its gradient off the GPU, the
server its parameters. NCCL is not used for them, on purpose: the server must take whichever
worker's gradient arrives first, and NCCL has no receive from any source, no way to cancel a
posted receive when a late worker abandons its work, and a dead peer hangs the communicator
rather than breaking a connection, which is how the server learns of a SIGKILLed worker. The
copy costs one device-to-host transfer of the gradient per iteration, small beside the network
trip that follows it.

``bdsgd distributed`` (``launch``) starts the n + 1 processes on this machine (a free port, all
children stopped on exit or Ctrl-C); under SLURM the same module runs as one srun step of n + 1
tasks, ranks and rendezvous from SLURM's environment (``bdsgd.devices.rank_env``).

Beside its result, metrics and trace, the server writes the virtual clock's run of its own record
(result.replay.parquet: per iteration the cutoff and duration ``bdsgd.cluster.server.replay_runtimes`` gives
a fresh policy on the recorded run-times), the real run and its replay side by side for
``bdsgd figures``.

The server checkpoints every train.checkpoint_every iterations (model, optimiser, the trace and
metrics so far, what the policy observed) beside its result; the same command after a killed
server resumes there with fresh workers, the policy rebuilt and shown the recorded iterations.
Wall times are real, so a resumed run is not byte-identical to an uninterrupted one.
"""
