from ref.cli import main

raise SystemExit(main())
