"""Our L-BFGS: one loop (:mod:`.loop`) over two places for its vectors, NumPy on the
host or every vector on the GPU that holds the fit (:mod:`.device`), with the
strong-Wolfe line search on scalars (:mod:`.line_search`)."""
