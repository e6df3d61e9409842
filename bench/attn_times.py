"""The measured time of one `wallfacer attn --json` run, for the tables that rank runs by it."""


def measured_ms(run):
    """The iteration: the slowest rank's forward + backward ("iteration_ms"). Runs recorded before
    attn printed it give the slowest forward plus the slowest backward, which is the same when the
    ranks end the forward together and more when some end it early and wait in the backward."""
    if "iteration_ms" in run:
        return run["iteration_ms"]
    return run["time_ms"]["fwd"] + run["time_ms"]["bwd"]
