"""The modules of ``tools/mmdet_zoo.py``: mmdet 2.x's model zoo run through mmpar.

``tools/`` is no package, so ``tools/mmdet_zoo.py`` loads this folder by its path
as the package ``mmpar_zoo`` (registered in ``sys.modules``, where forked and
spawned children find it too), and its modules import each other by that name.
Nothing here imports torch, numpy, mmcv or mmdet at import time: a bad option is
refused at once, and the heavy imports happen where a config runs.

* ``cli``: the options, and a user error's one line (``error: ...``, exit 2);
* ``selection``: which configs run (``--configs-root``, ``--dirs``, ``--filter``,
  ``--one-per-dir``);
* ``config``: a config loaded and made safe to run (no pretrained weights, fewer
  RoIs), and the packages it needs;
* ``needs``: what a config's model takes (keys, mask kind, image sizes, classes);
* ``batch``: the small random train and test batches, collated by mmpar;
* ``checks``: the form mmdet's test results must have;
* ``one_config``: one config in this process: build, one training step, one test
  batch, its result as a JSON-able dict;
* ``processes``: many configs, each in a child process, with timeouts;
* ``report``: the lines, the summary, the by-directory table and the JSON file.
"""
