"""Pipeline steps: each module holds a plain function that does the work and a thin KFP component around it."""
