"""Everything that touches Ray: the cluster, Tune's set-up, a trial's payload and the trainable.

Everything that touches Ray: the cluster (`cluster`: start, join, stop, stale-process clean-up,
what fits), Tune's set-up (`tune`: grid, Optuna, ASHA, progress), the typed payload a trial receives
(`payload`) and the trainable that runs it in a worker (`trainable`)."""
