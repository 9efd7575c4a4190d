"""``python -m vaswani.data.demo --output_dir DIR``: write the demo dataset's jsonl files and print a few samples."""

from vaswani.data.demo import main

if __name__ == "__main__":
    main()
