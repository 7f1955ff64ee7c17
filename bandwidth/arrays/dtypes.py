"""The element types a run exchanges, by name, and their bytes: known without torch (the command
line checks and sizes a job before importing it; bandwidth.arrays.layout maps them to torch's)."""

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
