"""mmpar's tests, a regular package.

Some codebases' wheels (mmsegmentation 0.30.0, mmpose 0.29.0) install a top-level
``tests`` package into site-packages, and a regular package there shadows a
namespace package of the same name wherever it sits on ``sys.path``: without this
file ``from tests.compat._mmcv_env import ...`` would import theirs.
"""
