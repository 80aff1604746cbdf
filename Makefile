# Two commands do everything: `make book` and `make test` (see README.md).
PY      := .venv/bin/python
JOBS    ?= $(shell nproc)
STAMP   := .venv/.installed

.PHONY: book test execute site unit chapters site-checks browser-deps bench sweep clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

## make book: environment, every chapter executed once (cached), the site in _build/html
book: $(STAMP)
	$(PY) tools/run_book.py --jobs $(JOBS)
	$(PY) benchmarks/run_benchmarks.py --quick
	$(PY) tools/build_site.py

## make test: unit and house-rule tests, every chapter with its claims, quick benchmarks (the registry page shows
## them), the book build, offline and browser checks
## (chapters one at a time: their CPU-second budgets are measured without a co-runner, which on two hyperthreads
## of one core inflates a chapter's CPU time by about a quarter)
test: $(STAMP) browser-deps
	$(PY) -m pytest -m "not book" -n 2 -p no:cacheprovider tests
	$(PY) tools/run_book.py --jobs 1 --force
	$(PY) benchmarks/run_benchmarks.py --quick
	$(PY) tools/build_site.py
	$(PY) -m pytest -m book -p no:cacheprovider tests

browser-deps:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null)

## make sweep CHAPTER=<slug> SEEDS=0-9 PARAMS="scale=1,2" [SCHEDULER=tcp://HOST:8786]: one chapter over a grid, on Dask
CHAPTER ?=
SEEDS   ?= 0-9
PARAMS  ?=
SCHEDULER ?=
sweep: $(STAMP)
	@test -n "$(CHAPTER)" || (echo 'make sweep needs CHAPTER=<slug>' >&2; exit 2)
	$(PY) tools/sweep.py $(CHAPTER) --seeds $(SEEDS) $(if $(PARAMS),--params $(PARAMS)) $(if $(SCHEDULER),--scheduler $(SCHEDULER))

bench: $(STAMP)
	$(PY) benchmarks/run_benchmarks.py

clean:
	rm -rf _build
