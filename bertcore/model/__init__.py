"""The BERT network (Devlin et al. 2019, §3): embeddings, encoder and the MLM/NSP pre-training heads."""
from bertcore.model.bert import BertForPreTraining, PreTrainingOutput, count_parameters
from bertcore.model.functional import sinusoidal_table

__all__ = ["BertForPreTraining", "PreTrainingOutput", "count_parameters", "sinusoidal_table"]
