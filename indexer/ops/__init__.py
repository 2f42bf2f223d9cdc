"""Operations on a store: doctor, consistency checks, reindex and status."""
