"""Front ends: models in other formats turned into our IRModule (what the parser gives for Relay
text). Each lives in its own package and imports its format's library only there."""
