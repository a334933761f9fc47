"""The writing side of the statistics store: atomic commits, the lock, Arrow rows of each table, upgrades of older stores."""
