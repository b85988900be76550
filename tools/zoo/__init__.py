"""The modules of ``tools/zoo.py``: OpenMMLab 1.x codebases' model zoos run through mmpar.

``tools/`` is no package, so ``tools/zoo.py`` (and ``tools/mmdet_zoo.py``, its mmdet
alias) loads this folder by its path as the package ``mmpar_zoo`` (registered in
``sys.modules``, where forked and spawned children find it too), and its modules
import each other by that name. Nothing here imports torch, numpy, mmcv or a
codebase at import time: a bad option is refused at once, and the heavy imports
happen where a config runs.

* ``cli``: the options, and a user error's one line (``error: ...``, exit 2);
* ``environment``: ``--pythonpath`` for the tool and its children;
* ``selection``: which configs run (``--configs-root``, ``--dirs``, ``--configs``,
  ``--filter``, ``--one-per-dir``), model directories at any depth;
* ``config``: a config loaded and made safe to run (no pretrained weights, fewer
  RoIs), and the packages it needs;
* ``codebase``: what a codebase's zoo takes (:class:`~mmpar_zoo.codebase.Codebase`)
  and the steps every codebase shares; ``codebases/`` holds one module per codebase
  (``det``: mmdet, ``rotate``: mmrotate, ``seg``: mmseg, ``ocr`` and
  ``ocr_samples``: mmocr, ``edit``: mmedit, ``action``: mmaction2, ``det3d``,
  ``det3d_scene`` and ``det3d_samples``: mmdet3d, ``build_only``: mmpose, mmcls, mmtrack);
* ``needs``, ``batch``, ``checks``: the detection parts (mmdet's, and mmrotate's and
  mmocr's Mask R-CNN): what the model takes, its random batches, its results' form;
* ``images``: the random images and image metas every codebase's batch is made of;
* ``fixes``: mends of the codebases' own bugs that stop a run without a GPU;
* ``one_config``: one config in this process: build, one training step, one test
  batch, its result as a JSON-able dict;
* ``processes``: many configs, each in a child process, with timeouts;
* ``report``: the lines, the summary, the by-directory table and the JSON file.
"""
