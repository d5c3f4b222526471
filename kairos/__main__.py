from kairos.cli import main

raise SystemExit(main())
