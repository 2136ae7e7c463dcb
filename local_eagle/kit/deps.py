"""Which wheels the GPU machine needs: local-eagle's dependency closure minus what its image holds.

The closure is read from this environment's installed metadata (so the versions shipped are the
ones tested here), with markers evaluated for the GPU machine's Python; packages its image
already has are left out, because two versions of one package stop an offline install.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

try:
    from packaging.markers import default_environment
    from packaging.requirements import InvalidRequirement, Requirement
except ImportError:  # pragma: no cover - pip always vendors packaging
    from pip._vendor.packaging.markers import default_environment  # type: ignore[no-redef]
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement  # type: ignore[no-redef]

# the lent GPU machines' image 'cuda', as the device tool's KINDS.md lists it (read 2026-11-17); torch among them
GPU_IMAGE_PACKAGES = frozenset(
    """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
    certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
    cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
    flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
    huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin
    jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax
    llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack
    multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
    nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft
    nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py
    nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
    opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec
    patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
    py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
    pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
    scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools
    shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server
    tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric
    torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3
    uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp""".split()
)

# what the GPU call runs of local-eagle: the core and the lossless part of the suite (pytest, hypothesis and scipy,
# which the image has; jsonschema, which it lacks: tests/runtime imports it, and a module that fails to import fails
# the whole selection's collection); not the server nor its clients' tests, not torch (the image has it), not the
# model packages
ROOT_EXTRAS: tuple[str, ...] = ()
TEST_TOOLS = ("pytest", "hypothesis", "scipy", "jsonschema")
SKIP = frozenset({"local-eagle", "llama-cpp-python", "torch"})
# shipped although the image has them: typer, because the image's version is not known (its pip list names no
# version) and every CLI stage of the call needs one that local-eagle's CLI runs on; with what it needs (pydantic)
ALWAYS: frozenset[str] = frozenset({"typer"})


PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _own_requirements(extras: tuple[str, ...]) -> list[str]:
    """local-eagle's requirements from its pyproject.toml, the source of truth: an editable install's metadata
    keeps the requirements it had when it was installed."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    lines = list(project.get("dependencies", []))
    for extra in extras:
        lines += [f"{r}; extra == '{extra}'" for r in project.get("optional-dependencies", {}).get(extra, [])]
    return lines


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True, order=True)
class Pin:
    name: str
    version: str

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"


def _environment(python_version: str) -> dict[str, str]:
    env = default_environment()
    env.update(python_version=python_version, python_full_version=python_version + ".0",
               sys_platform="linux", platform_system="Linux", os_name="posix", platform_machine="x86_64",
               implementation_name="cpython", platform_python_implementation="CPython")
    return env


def closure(roots: list[tuple[str, tuple[str, ...]]], python_version: str = "3.12",
            stop: frozenset[str] = frozenset()) -> list[Pin]:  # fmt: skip
    """Installed distributions reachable from ``roots`` (name, extras), markers evaluated for the target Python.

    Packages in ``stop`` are listed but not followed: the image's own copy brings what its version needs (a newer
    one here may need more, typer 0.29 pydantic, which the image's does not). Raises ``LookupError`` naming a
    requirement that is not installed here: the kit is made from an environment with local-eagle's dev extra.
    """
    env = _environment(python_version)
    seen: dict[str, Pin] = {}
    todo = [(normalize(n), tuple(extras)) for n, extras in roots]
    done: set[tuple[str, str]] = set()
    while todo:
        name, extras = todo.pop()
        key = (name, ",".join(sorted(extras)))
        if key in done:
            continue
        done.add(key)
        if name == "local-eagle" and PYPROJECT.is_file():
            seen[name] = Pin(name, "source")
            requires = _own_requirements(extras)
        else:
            try:
                dist = metadata.distribution(name)
                seen[name] = Pin(name, dist.version)
                requires = dist.requires or []
            except metadata.PackageNotFoundError:
                raise LookupError(
                    f"{name} is not installed here (make the kit from an environment with local-eagle[dev])"
                ) from None
        if name in stop:
            continue
        for line in requires:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in ("", *extras)):
                todo.append((normalize(req.name), tuple(sorted(req.extras))))
    return sorted(seen.values())


def wheels_needed(python_version: str = "3.12", present: frozenset[str] = GPU_IMAGE_PACKAGES) -> list[Pin]:
    """The pins to download as wheels for the GPU machine."""
    roots = [("local-eagle", ROOT_EXTRAS), ("llama-cpp-python", ()), *((t, ()) for t in TEST_TOOLS)]
    return [p for p in closure(roots, python_version, present - ALWAYS)
            if p.name not in SKIP and (p.name not in present or p.name in ALWAYS)]  # fmt: skip
