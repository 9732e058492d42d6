from ref.cli import main

if __name__ == "__main__":  # not when a spawned child (conform --isolate) imports it as __mp_main__
    raise SystemExit(main())
