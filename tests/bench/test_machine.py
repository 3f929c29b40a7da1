from bench import machine

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8488C
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw avx512vl avx512_vnni avx512_fp16

processor\t: 1
model name\t: something else
"""


def test_cpuinfo_reads_the_first_processors_model_and_vector_flags():
    info = machine.cpuinfo(CPUINFO)
    assert info == {"model": "Intel(R) Xeon(R) Platinum 8488C",
                    "vector_flags": ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                                     "avx512_vnni", "avx512_fp16"]}


def test_summary_names_the_widest_vector_extension():
    info = {**machine.cpuinfo(CPUINFO), "cores": 2}
    assert machine.summary(info).startswith("Intel(R) Xeon(R) Platinum 8488C, 2 cores, AVX-512 (")
    assert "AVX2 (" in machine.summary({"model": "AMD EPYC", "cores": 2, "vector_flags": ["avx2", "fma"]})


def test_fma_peak_uses_the_build_machines_vector_width(tmp_path):
    binary = machine.build_fma_peak(tmp_path)
    peak = machine.fma_peak(binary, threads=1, seconds=0.01)
    flags = machine.cpuinfo(open("/proc/cpuinfo").read())["vector_flags"]
    assert peak["vector_bits"] == (512 if "avx512f" in flags else 256 if "avx" in flags else 128)
    assert peak["gflops"] > 0
