"""The output folder of a Vertex job after its cached plan (`components.lib.vertex.output_dirs`)."""


def claim_output_directory(root: str, run_name: str) -> str:
    """KFP step (Vertex, never cached): the job's base output directory under the plan's `root`: the folder of the
    job that completed there (Vertex's cache serves that job), else a new folder for this run.

    Args:
        root: The plan's base output directory.
        run_name: The pipeline job's name (a new folder is named after it).
    """
    from components.lib.vertex.output_dirs import claim

    return claim(root, run_name)
