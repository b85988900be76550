"""mmpar's tests: a regular package, so that no installed package named ``tests`` shadows it.

mmsegmentation's and mmpose's wheels install a top-level ``tests`` package, and a regular
package anywhere on ``sys.path`` wins over a namespace package found first.
"""
