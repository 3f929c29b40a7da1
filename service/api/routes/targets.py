"""`GET /targets`: what a compile request may ask for."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from compiler.byoc.codegen_config import builtin, builtin_names
from compiler.driver import HOST_TARGETS
from compiler.ops.catalog import catalog
from compiler.config_registry import ALLOWED_CFLAGS, DEFINE_FLAG
from compiler.config_registry import catalog as config_catalog
from service.api.routes.docs import AUTHENTICATED, problem_responses
from service.jobs.sandbox.policy import user_c_refusal
from service.api.schemas import CodegenInfo, OperatorInfo, TargetsInfo
from service.api.security import client_identity
from service.state import StateDep

router = APIRouter(tags=["targets"], dependencies=[Depends(client_identity)])


@router.get(
    "/targets",
    summary="Targets and codegens",
    description="The host targets, the built-in external codegens with their patterns, whether "
    "codegen documents (and their C sources) are accepted, the C flags a request may choose, and every "
    "supported operator with its attributes and defaults, and the configuration registry (`config`: "
    "every pass_config key a request may set, its type and default).",
    responses=problem_responses(*AUTHENTICATED),
)
def list_targets(state: StateDep) -> TargetsInfo:
    codegens = []
    for name in builtin_names():
        spec = builtin(name)
        if spec is None:
            continue
        codegens.append(CodegenInfo.model_validate({
            "name": spec.name,
            "mode": spec.mode,
            "patterns": [
                {"name": p.name, "pattern": p.text, "symbol": p.symbol, "attrs": [str(a) for a in p.attrs]}
                for p in spec.patterns
            ],
        }))
    return TargetsInfo(
        hosts=list(HOST_TARGETS),
        executors=["aot"],
        codegens=codegens,
        codegen_documents=True,
        user_c_allowed=user_c_refusal(state.settings) is None,
        allowed_cflags=sorted(ALLOWED_CFLAGS) + [DEFINE_FLAG],
        config=config_catalog(),
        operators=[OperatorInfo.model_validate(entry) for entry in catalog()],
    )
