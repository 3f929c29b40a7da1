"""The back end: LowerTE and its targets, the AOT executor codegen with its static memory plan,
C code generation from the loop-level IR, the metadata report and Model Library Format export.

Each concern is its own module; import them directly (`compiler.backend.codegen_c`).
"""
